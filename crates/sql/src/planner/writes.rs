//! Plans of the statements that write: INSERT (with column DEFAULTs and
//! generated values), UPDATE (`c = v`, `c = c op v`) and DELETE.

use super::*;

pub(super) fn plan_insert(catalog: &Catalog, sql: &str, ins: &ast::Insert) -> Result<Plan> {
    if ins.or.is_some()
        || ins.on.is_some()
        || ins.returning.is_some()
        || ins.overwrite
        || !ins.assignments.is_empty()
        || ins.partitioned.is_some()
    {
        return unsupported("INSERT with OR, ON CONFLICT, RETURNING, SET or PARTITION");
    }
    let TableObject::TableName(name) = &ins.table else {
        return unsupported("INSERT into a table function");
    };
    let mut b = Builder::new(catalog, name, None)?;
    let table = b.table;
    let Some(source) = &ins.source else {
        return unsupported("INSERT without VALUES");
    };
    let AstSetExpr::Values(values) = source.body.as_ref() else {
        return unsupported("INSERT ... SELECT (only INSERT ... VALUES)");
    };
    let [row] = values.rows.as_slice() else {
        return unsupported("INSERT of several rows in one statement (one VALUES row)");
    };
    let targets: Vec<usize> = if ins.columns.is_empty() {
        (0..table.columns.len()).collect()
    } else {
        ins.columns
            .iter()
            .map(|c| table.column_index(&c.value))
            .collect::<Result<_>>()?
    };
    if targets.len() != row.len() {
        return Err(Error::Arity {
            what: format!("VALUES of INSERT into `{}`", table.name),
            expected: targets.len(),
            got: row.len(),
        });
    }
    let mut ops: Vec<Option<Operand>> = vec![None; table.columns.len()];
    for (&c, e) in targets.iter().zip(row) {
        if ops[c].is_some() {
            return Err(Error::DuplicateColumn {
                table: table.name.clone(),
                column: table.columns[c].name.clone(),
            });
        }
        ops[c] = Some(b.operand(e, c, Role::Stored)?);
    }
    for (c, op) in ops.iter_mut().enumerate() {
        if op.is_none() {
            *op = match &table.columns[c].default {
                Some(ColumnDefault::Value(v)) => Some(Operand::Literal(v.clone())),
                Some(ColumnDefault::Generated(g)) => Some(b.generate(*g)),
                None => None,
            };
        }
    }
    for (c, op) in ops.iter().enumerate() {
        let null = matches!(op, None | Some(Operand::Literal(Value::Null)));
        if null && !table.columns[c].nullable {
            return Err(Error::NotNull {
                table: table.name.clone(),
                column: table.columns[c].name.clone(),
            });
        }
    }
    let key_params = table
        .primary_key
        .iter()
        .filter_map(|&c| ops[c].clone().map(|op| (c, op)))
        .collect();
    let access = AccessDescriptor {
        table: table.id,
        kind: StatementKind::Insert,
        index: IndexId::PRIMARY,
        columns_read: Vec::new(),
        columns_written: (0..table.columns.len()).collect(),
        key_params,
        range: false,
        range_column: None,
        blind_increment: false,
        partition_key: ops[table.partition_column()].clone(),
    };
    let stmt = Statement::Insert(InsertPlan { values: ops });
    Ok(b.finish(sql, Vec::new(), access, stmt))
}

pub(super) fn plan_update(
    catalog: &Catalog,
    sql: &str,
    target: &TableWithJoins,
    assignments: &[ast::Assignment],
    selection: Option<&Expr>,
) -> Result<Plan> {
    let mut b = Builder::from_table_with_joins(catalog, target)?;
    let table = b.table;
    let mut sets: Vec<Assignment> = Vec::with_capacity(assignments.len());
    for a in assignments {
        let ast::AssignmentTarget::ColumnName(name) = &a.target else {
            return unsupported("tuple assignments in SET");
        };
        let column = table.column_index(&object_name(name)?)?;
        if table.primary_key.contains(&column) {
            return Err(Error::Sql(format!(
                "unsupported: cannot update primary-key column `{}` (delete and insert instead)",
                table.columns[column].name
            )));
        }
        if sets.iter().any(|s| s.column == column) {
            return Err(Error::Sql(format!(
                "column `{}` is assigned twice",
                table.columns[column].name
            )));
        }
        let expr = match &a.value {
            Expr::BinaryOp { left, op, right } => {
                let aop = match op {
                    BinaryOperator::Plus => ArithOp::Add,
                    BinaryOperator::Minus => ArithOp::Sub,
                    BinaryOperator::Multiply => ArithOp::Mul,
                    other => {
                        return Err(Error::Sql(format!(
                            "unsupported operator `{other}` in SET (only +, -, *)"
                        )))
                    }
                };
                let (source, operand_expr) = match (b.column(left)?, b.column(right)?) {
                    (Some(s), None) => (s, right),
                    (None, Some(s)) if aop != ArithOp::Sub => (s, left),
                    _ => {
                        return Err(Error::Sql(format!(
                            "unsupported SET expression `{}`: expected `column {op} value`",
                            a.value
                        )))
                    }
                };
                if !matches!(
                    table.columns[source].ty,
                    DataType::Int | DataType::Decimal { .. }
                ) {
                    return Err(Error::type_mismatch(
                        format!("arithmetic on `{}`", table.columns[source].name),
                        "a numeric column",
                        table.columns[source].ty,
                    ));
                }
                if is_null_literal(operand_expr) {
                    // `c op NULL` is NULL whatever `c` holds, as in
                    // PostgreSQL: stored as a plain NULL assignment, which
                    // a NOT NULL column refuses.
                    let null = Operand::Literal(Value::Null);
                    let col = &table.columns[column];
                    if !col.nullable {
                        return Err(Error::NotNull {
                            table: table.name.clone(),
                            column: col.name.clone(),
                        });
                    }
                    SetExpr::Value(null)
                } else {
                    let operand = b.operand(operand_expr, column, Role::Arith)?;
                    SetExpr::Arith {
                        source,
                        op: aop,
                        operand,
                    }
                }
            }
            e => SetExpr::Value(b.operand(e, column, Role::Stored)?),
        };
        sets.push(Assignment { column, expr });
    }
    let pred = b.where_predicate(selection)?;
    let mut access = base_access(table, StatementKind::Update, &pred);
    let mut read: Vec<usize> = sets
        .iter()
        .filter_map(|s| match s.expr {
            SetExpr::Arith { source, .. } => Some(source),
            SetExpr::Value(_) => None,
        })
        .collect();
    read.extend(predicate_reads(table, &pred));
    access.columns_read = sorted_unique(read);
    access.columns_written = sorted_unique(sets.iter().map(|s| s.column).collect());
    access.blind_increment = pred.index == IndexId::PRIMARY
        && pred.filters.is_empty()
        && sets.iter().all(|s| {
            matches!(s.expr, SetExpr::Arith { source, op: ArithOp::Add | ArithOp::Sub, .. }
                if source == s.column)
        });
    let stmt = Statement::Update(UpdatePlan { pred, sets });
    Ok(b.finish(sql, Vec::new(), access, stmt))
}

pub(super) fn plan_delete(catalog: &Catalog, sql: &str, del: &ast::Delete) -> Result<Plan> {
    if !del.tables.is_empty()
        || del.using.is_some()
        || del.returning.is_some()
        || !del.order_by.is_empty()
        || del.limit.is_some()
    {
        return unsupported("DELETE with USING, RETURNING, ORDER BY, LIMIT or several tables");
    }
    let (ast::FromTable::WithFromKeyword(from) | ast::FromTable::WithoutKeyword(from)) = &del.from;
    let [t] = from.as_slice() else {
        return unsupported("DELETE from several tables");
    };
    let mut b = Builder::from_table_with_joins(catalog, t)?;
    let table = b.table;
    let pred = b.where_predicate(del.selection.as_ref())?;
    let mut access = base_access(table, StatementKind::Delete, &pred);
    access.columns_read = sorted_unique(predicate_reads(table, &pred));
    access.columns_written = (0..table.columns.len()).collect();
    let stmt = Statement::Delete(DeletePlan { pred });
    Ok(b.finish(sql, Vec::new(), access, stmt))
}
