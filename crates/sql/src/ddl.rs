//! DDL: a script of `CREATE TABLE` / `CREATE INDEX` statements -> `Catalog`.

use crate::literal::{generator, literal, literal_for, object_name};
use brine_core::schema::Partitioning;
use brine_core::{
    Catalog, ColumnDef, ColumnDefault, DataType, Decimal, Error, IndexDef, Result, TableDef,
    TableId,
};
use sqlparser::ast::{self, ColumnOption, Expr, SqlOption, Statement, TableConstraint};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

/// Parses a schema script into a catalog. See the crate documentation for
/// the accepted forms.
pub fn parse_schema(ddl: &str) -> Result<Catalog> {
    let statements = Parser::parse_sql(&GenericDialect {}, ddl)
        .map_err(|e| Error::Sql(format!("cannot parse schema: {e}")))?;
    let mut catalog = Catalog::new();
    for stmt in statements {
        match stmt {
            Statement::CreateTable(ct) => {
                let def = table_def(&ct)?;
                catalog.add_table(def)?;
            }
            Statement::CreateIndex(ci) => create_index(&mut catalog, &ci)?,
            other => {
                return Err(Error::Sql(format!(
                    "only CREATE TABLE and CREATE INDEX are allowed in a schema, got `{other}`"
                )))
            }
        }
    }
    Ok(catalog)
}

fn data_type(table: &str, column: &str, ty: &ast::DataType) -> Result<DataType> {
    use ast::DataType as T;
    let char_len = |l: &Option<ast::CharacterLength>| match l {
        Some(ast::CharacterLength::IntegerLength { length, .. }) => {
            Some(u32::try_from(*length).unwrap_or(u32::MAX))
        }
        _ => None,
    };
    let decimal = |info: &ast::ExactNumberInfo| -> Result<DataType> {
        let (precision, scale) = match info {
            ast::ExactNumberInfo::None => (18, 0),
            ast::ExactNumberInfo::Precision(p) => (*p, 0),
            ast::ExactNumberInfo::PrecisionAndScale(p, s) => (*p, (*s).max(0) as u64),
        };
        if precision == 0 || precision > u64::from(Decimal::MAX_PRECISION) || scale > precision {
            return Err(Error::Schema(format!(
                "column `{table}.{column}`: DECIMAL({precision},{scale}) is not supported \
                 (precision 1..=18, scale <= precision)"
            )));
        }
        Ok(DataType::Decimal {
            precision: precision as u8,
            scale: scale as u8,
        })
    };
    Ok(match ty {
        T::Int(_)
        | T::Integer(_)
        | T::BigInt(_)
        | T::SmallInt(_)
        | T::Int2(_)
        | T::Int4(_)
        | T::Int8(_)
        | T::TinyInt(_) => DataType::Int,
        T::Decimal(info) | T::Numeric(info) | T::Dec(info) => decimal(info)?,
        T::Varchar(l) | T::Char(l) | T::Character(l) | T::CharacterVarying(l) => DataType::Str {
            max_len: char_len(l),
        },
        T::Text | T::String(None) => DataType::Str { max_len: None },
        T::Timestamp(_, _) => DataType::Timestamp,
        other => {
            return Err(Error::Schema(format!(
                "column `{table}.{column}`: unsupported type {other} \
                 (use INT, DECIMAL(p,s), VARCHAR(n), CHAR(n), TEXT or TIMESTAMP)"
            )))
        }
    })
}

fn column_position(def: &TableDef, name: &str) -> Result<usize> {
    def.column_index(name)
}

fn index_column_names(cols: &[ast::IndexColumn]) -> Result<Vec<String>> {
    cols.iter()
        .map(|c| match &c.column.expr {
            Expr::Identifier(id) => Ok(id.value.clone()),
            other => Err(Error::Sql(format!(
                "index columns must be plain column names, got `{other}`"
            ))),
        })
        .collect()
}

/// The partitioning column named by `PARTITION BY (col)` / `PARTITION BY
/// col` or `WITH (partition_by = 'col')`.
fn partition_clause(ct: &ast::CreateTable) -> Result<Option<String>> {
    if let Some(expr) = &ct.partition_by {
        let mut e: &Expr = expr;
        while let Expr::Nested(inner) = e {
            e = inner;
        }
        return match e {
            Expr::Identifier(id) => Ok(Some(id.value.clone())),
            other => Err(Error::Sql(format!(
                "PARTITION BY takes one column name, got `{other}`"
            ))),
        };
    }
    if let ast::CreateTableOptions::With(opts) = &ct.table_options {
        for opt in opts {
            if let SqlOption::KeyValue { key, value } = opt {
                if key.value.eq_ignore_ascii_case("partition_by") {
                    return match value {
                        Expr::Value(v) => match &v.value {
                            ast::Value::SingleQuotedString(s) => Ok(Some(s.clone())),
                            other => Err(Error::Sql(format!(
                                "partition_by must be a quoted column name, got {other}"
                            ))),
                        },
                        Expr::Identifier(id) => Ok(Some(id.value.clone())),
                        other => Err(Error::Sql(format!(
                            "partition_by must be a quoted column name, got {other}"
                        ))),
                    };
                }
                return Err(Error::Sql(format!(
                    "unsupported table option `{}`",
                    key.value
                )));
            }
        }
    }
    Ok(None)
}

fn table_def(ct: &ast::CreateTable) -> Result<TableDef> {
    let name = object_name(&ct.name)?;
    if ct.query.is_some() || ct.like.is_some() {
        return Err(Error::Sql(format!(
            "CREATE TABLE `{name}`: AS/LIKE is not supported"
        )));
    }
    let mut def = TableDef {
        id: TableId(0),
        name: name.clone(),
        columns: Vec::with_capacity(ct.columns.len()),
        primary_key: Vec::new(),
        indexes: Vec::new(),
        partitioning: Partitioning::Column(0),
    };
    let mut pk_names: Vec<String> = Vec::new();
    let mut uniques: Vec<Vec<String>> = Vec::new();
    for col in &ct.columns {
        let cname = col.name.value.clone();
        if def.column_index(&cname).is_ok() {
            return Err(Error::DuplicateColumn {
                table: name.clone(),
                column: cname,
            });
        }
        let ty = data_type(&name, &cname, &col.data_type)?;
        let mut nullable = true;
        let mut default = None;
        for opt in &col.options {
            match &opt.option {
                ColumnOption::NotNull => nullable = false,
                ColumnOption::Default(e) => default = Some(column_default(&name, &cname, ty, e)?),
                ColumnOption::Null => nullable = true,
                ColumnOption::Unique {
                    is_primary: true, ..
                } => {
                    if !pk_names.is_empty() {
                        return Err(Error::Schema(format!(
                            "table `{name}` declares more than one primary key"
                        )));
                    }
                    pk_names.push(cname.clone());
                }
                ColumnOption::Unique {
                    is_primary: false, ..
                } => uniques.push(vec![cname.clone()]),
                other => {
                    return Err(Error::Sql(format!(
                        "column `{name}.{cname}`: unsupported column option `{other}`"
                    )))
                }
            }
        }
        def.columns.push(ColumnDef {
            name: cname,
            ty,
            nullable,
            default,
        });
    }
    for c in &ct.constraints {
        match c {
            TableConstraint::PrimaryKey { columns, .. } => {
                if !pk_names.is_empty() {
                    return Err(Error::Schema(format!(
                        "table `{name}` declares more than one primary key"
                    )));
                }
                pk_names = index_column_names(columns)?;
            }
            TableConstraint::Unique { columns, .. } => uniques.push(index_column_names(columns)?),
            other => {
                return Err(Error::Sql(format!(
                    "table `{name}`: unsupported constraint `{other}`"
                )))
            }
        }
    }
    if pk_names.is_empty() {
        return Err(Error::Schema(format!(
            "table `{name}` has no primary key (rows without a natural key can take a \
             generated one: `id INT DEFAULT unique_rowid() PRIMARY KEY`)"
        )));
    }
    for pk in &pk_names {
        let c = column_position(&def, pk)?;
        if def.primary_key.contains(&c) {
            return Err(Error::Schema(format!(
                "table `{name}`: column `{pk}` appears twice in the primary key"
            )));
        }
        def.primary_key.push(c);
        // Primary-key columns are implicitly NOT NULL.
        def.columns[c].nullable = false;
    }
    let pcol = match partition_clause(ct)? {
        Some(p) => column_position(&def, &p)?,
        None => def.primary_key[0],
    };
    if !def.primary_key.contains(&pcol) {
        return Err(Error::Schema(format!(
            "table `{name}`: the partitioning column `{}` must be part of the primary key",
            def.columns[pcol].name
        )));
    }
    def.partitioning = Partitioning::Column(pcol);
    for (i, cols) in uniques.iter().enumerate() {
        let columns = cols
            .iter()
            .map(|c| column_position(&def, c))
            .collect::<Result<Vec<_>>>()?;
        let index = IndexDef {
            name: format!("{name}_unique_{i}"),
            columns,
            unique: true,
        };
        check_unique_is_partition_local(&def, &index)?;
        def.indexes.push(index);
    }
    Ok(def)
}

/// Refuses a unique index whose columns leave out the table's partitioning
/// column. A partition checks uniqueness among its own rows only (there
/// is no cluster-wide index), so two equal values on different partitions
/// would both be taken. With the partitioning column among the index
/// columns, equal values always live on one partition and the check is
/// complete. PostgreSQL refuses the same for partitioned tables, Citus for
/// distributed ones.
fn check_unique_is_partition_local(def: &TableDef, index: &IndexDef) -> Result<()> {
    let pcol = def.partition_column();
    if !index.unique || index.columns.contains(&pcol) {
        return Ok(());
    }
    let pname = &def.columns[pcol].name;
    let cols: Vec<&str> = index
        .columns
        .iter()
        .map(|&c| def.columns[c].name.as_str())
        .collect();
    Err(Error::Schema(format!(
        "table `{}`: unique index `{}` on ({}) must include the partitioning column `{pname}`: \
         brine checks uniqueness within a partition, so values equal on different partitions \
         would not be caught (add `{pname}` to the index's columns, or make it a plain index)",
        def.name,
        index.name,
        cols.join(", ")
    )))
}

/// `DEFAULT e`: a literal of the column's type, or a generator of it.
fn column_default(table: &str, column: &str, ty: DataType, e: &Expr) -> Result<ColumnDefault> {
    if let Some(g) = generator(e) {
        if g.ty() != ty {
            return Err(Error::type_mismatch(
                format!("DEFAULT {g} of `{table}.{column}`"),
                ty,
                g.ty(),
            ));
        }
        return Ok(ColumnDefault::Generated(g));
    }
    let col = ColumnDef {
        name: column.to_string(),
        ty,
        nullable: true,
        default: None,
    };
    match literal(e)? {
        Some(v) => Ok(ColumnDefault::Value(literal_for(table, &col, v)?)),
        None => Err(Error::Sql(format!(
            "column `{table}.{column}`: unsupported DEFAULT `{e}` (a literal, \
             CURRENT_TIMESTAMP, now() or unique_rowid())"
        ))),
    }
}

fn create_index(catalog: &mut Catalog, ci: &ast::CreateIndex) -> Result<()> {
    let table_name = object_name(&ci.table_name)?;
    let table = catalog.table_by_name(&table_name)?.id;
    let def = catalog.table_mut(table);
    let columns = index_column_names(&ci.columns)?
        .iter()
        .map(|c| def.column_index(c))
        .collect::<Result<Vec<_>>>()?;
    if columns.is_empty() {
        return Err(Error::Schema(format!(
            "index on `{table_name}` has no columns"
        )));
    }
    let name = match &ci.name {
        Some(n) => object_name(n)?,
        None => format!("{}_idx_{}", def.name, def.indexes.len()),
    };
    if def
        .indexes
        .iter()
        .any(|i| i.name.eq_ignore_ascii_case(&name))
    {
        return Err(Error::Schema(format!(
            "index `{name}` already exists on `{table_name}`"
        )));
    }
    let index = IndexDef {
        name,
        columns,
        unique: ci.unique,
    };
    check_unique_is_partition_local(def, &index)?;
    def.indexes.push(index);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use brine_core::{IndexId, Value};

    const SCHEMA: &str = "
        CREATE TABLE warehouse (
            w_id INT PRIMARY KEY,
            w_name VARCHAR(10),
            w_ytd DECIMAL(12,2) NOT NULL
        );
        CREATE TABLE customer (
            c_w_id INTEGER,
            c_d_id SMALLINT,
            c_id BIGINT,
            c_last VARCHAR(16) NOT NULL,
            c_first CHAR(16),
            c_balance NUMERIC(12, 2),
            c_note TEXT,
            c_since TIMESTAMP,
            PRIMARY KEY (c_w_id, c_d_id, c_id)
        ) PARTITION BY (c_w_id);
        CREATE INDEX customer_by_name ON customer (c_w_id, c_d_id, c_last, c_first);
        CREATE UNIQUE INDEX customer_note ON customer (c_w_id, c_note);
        CREATE TABLE item (i_id INT, i_price DECIMAL(5,2), PRIMARY KEY (i_id)) WITH (partition_by = 'i_id');
    ";

    #[test]
    fn parses_types_keys_indexes_and_partitioning() {
        let cat = parse_schema(SCHEMA).unwrap();
        assert_eq!(cat.tables().len(), 3);
        let w = cat.table_by_name("WAREHOUSE").unwrap();
        assert_eq!(w.primary_key, vec![0]);
        assert!(!w.columns[0].nullable, "pk columns are NOT NULL");
        assert!(w.columns[1].nullable);
        assert!(!w.columns[2].nullable);
        assert_eq!(
            w.columns[2].ty,
            DataType::Decimal {
                precision: 12,
                scale: 2
            }
        );
        assert_eq!(w.partition_column(), 0);

        let c = cat.table_by_name("customer").unwrap();
        assert_eq!(c.primary_key, vec![0, 1, 2]);
        assert_eq!(c.columns[1].ty, DataType::Int);
        assert_eq!(c.columns[3].ty, DataType::Str { max_len: Some(16) });
        assert_eq!(c.columns[4].ty, DataType::Str { max_len: Some(16) });
        assert_eq!(c.columns[6].ty, DataType::Str { max_len: None });
        assert_eq!(c.columns[7].ty, DataType::Timestamp);
        assert_eq!(c.partition_column(), 0);
        assert_eq!(c.indexes.len(), 2);
        assert_eq!(c.index_columns(IndexId(1)), &[0, 1, 3, 4]);
        assert!(!c.indexes[0].unique);
        assert!(c.indexes[1].unique);
        assert_eq!(c.index_name(IndexId(1)), "customer_by_name");

        let i = cat.table_by_name("item").unwrap();
        assert_eq!(i.partition_column(), 0);
    }

    #[test]
    fn partition_by_non_first_pk_column() {
        let cat = parse_schema(
            "CREATE TABLE t (a INT, b INT, v INT, PRIMARY KEY (a, b)) PARTITION BY b;",
        )
        .unwrap();
        assert_eq!(cat.table_by_name("t").unwrap().partition_column(), 1);
    }

    #[test]
    fn unique_indexes_must_include_the_partitioning_column() {
        let err = |s: &str| parse_schema(s).unwrap_err().to_string();
        // A column constraint, a table constraint and CREATE UNIQUE INDEX
        // are refused alike, naming the table, the index and the column.
        let e = err("CREATE TABLE p (id INT PRIMARY KEY, email TEXT UNIQUE);");
        assert!(e.contains("table `p`"), "{e}");
        assert!(e.contains("unique index `p_unique_0` on (email)"), "{e}");
        assert!(e.contains("partitioning column `id`"), "{e}");
        assert!(e.contains("within a partition"), "{e}");
        let e = err(
            "CREATE TABLE p (a INT, b INT, x INT, PRIMARY KEY (a, b), UNIQUE (a, x)) \
             PARTITION BY (b);",
        );
        assert!(e.contains("on (a, x)") && e.contains("column `b`"), "{e}");
        let e = err("CREATE TABLE p (id INT PRIMARY KEY, code INT); \
                     CREATE UNIQUE INDEX p_code ON p (code);");
        assert!(e.contains("unique index `p_code`"), "{e}");
        assert!(matches!(
            parse_schema("CREATE TABLE p (id INT PRIMARY KEY, code INT); CREATE UNIQUE INDEX p_code ON p (code);"),
            Err(Error::Schema(_))
        ));

        // With the partitioning column anywhere in it, or as a plain
        // index, it is accepted.
        let cat = parse_schema(
            "CREATE TABLE p (org INT, id INT, email TEXT, code INT,
                 PRIMARY KEY (org, id), UNIQUE (email, org)) PARTITION BY (org);
             CREATE UNIQUE INDEX p_code ON p (org, code);
             CREATE INDEX p_by_email ON p (email);",
        )
        .unwrap();
        let p = cat.table_by_name("p").unwrap();
        assert_eq!(p.indexes.len(), 3);
        assert!(p.indexes[0].unique && p.indexes[1].unique && !p.indexes[2].unique);
    }

    #[test]
    fn timestamp_defaults_read_postgres_text() {
        let cat = parse_schema(
            "CREATE TABLE e (id INT PRIMARY KEY, at TIMESTAMP DEFAULT '2024-03-01 12:00:00');",
        )
        .unwrap();
        assert_eq!(
            cat.table_by_name("e").unwrap().columns[1].default,
            Some(ColumnDefault::Value(Value::Timestamp(
                1_709_294_400_000_000
            )))
        );
        assert!(matches!(
            parse_schema("CREATE TABLE e (id INT PRIMARY KEY, at TIMESTAMP DEFAULT 'soon');"),
            Err(Error::Type { .. })
        ));
    }

    #[test]
    fn schema_errors_are_typed() {
        let err = |s: &str| parse_schema(s).unwrap_err();
        assert!(matches!(
            err("CREATE TABLE t (a INT PRIMARY KEY); CREATE TABLE T (b INT PRIMARY KEY);"),
            Error::Schema(_)
        ));
        assert!(matches!(
            err("CREATE TABLE t (a INT, PRIMARY KEY (zz));"),
            Error::UnknownColumn { .. }
        ));
        assert!(matches!(
            err("CREATE TABLE t (a INT PRIMARY KEY); CREATE INDEX i ON t (nope);"),
            Error::UnknownColumn { .. }
        ));
        assert!(matches!(
            err("CREATE TABLE t (a INT PRIMARY KEY); CREATE INDEX i ON u (a);"),
            Error::UnknownTable(_)
        ));
        assert!(matches!(
            err("CREATE TABLE t (a INT PRIMARY KEY, b INT) PARTITION BY (b);"),
            Error::Schema(_)
        ));
        assert!(matches!(err("CREATE TABLE t (a INT);"), Error::Schema(_)));
        assert!(matches!(
            err("CREATE TABLE t (a INT PRIMARY KEY, A TEXT);"),
            Error::DuplicateColumn { .. }
        ));
        assert!(matches!(
            err("CREATE TABLE t (a BLOB PRIMARY KEY);"),
            Error::Schema(_)
        ));
        assert!(matches!(err("CREATE TABLE t (a INT"), Error::Sql(_)));
        assert!(matches!(err("SELECT 1;"), Error::Sql(_)));
    }
}
