//! The seed's online store (seed 004 section 3.2, Figure 1), shared by
//! the Elia tests: carts created and filled locally by cart id, orders
//! global (they take stock every add reads).
#![allow(dead_code)]

use brine_cluster::protocols::elia::{Class, Routes};
use brine_cluster::{Application, ProcedureDef};
use brine_core::Value;

const DDL: &str = "
CREATE TABLE stock (item INT, qty INT NOT NULL, PRIMARY KEY (item));
CREATE TABLE cart (cart INT, owner INT NOT NULL, PRIMARY KEY (cart));
CREATE TABLE cart_line (cart INT, item INT, qty INT NOT NULL, PRIMARY KEY (cart, item)) PARTITION BY (cart);
";

pub const SERVERS: u32 = 3;
pub const ITEMS: i64 = 4;
pub const STOCK: i64 = 1_000;

pub fn int(v: &Value) -> i64 {
    v.as_int().expect("an INT")
}

pub fn app() -> Application {
    let create = ProcedureDef::new("create")
        .statement(
            "insert",
            "INSERT INTO cart (cart, owner) VALUES ($cart, $owner)",
        )
        .body(|mut ctx, args| async move {
            ctx.exec("insert", args).await?;
            Ok(vec![])
        });
    // add(cart, item, qty): only if the stock has that many.
    let add = ProcedureDef::new("add")
        .statement("stock", "SELECT qty FROM stock WHERE item = $item")
        .statement(
            "line",
            "INSERT INTO cart_line (cart, item, qty) VALUES ($cart, $item, $qty)",
        )
        .body(|mut ctx, args| async move {
            let q = ctx.exec("stock", vec![args[1].clone()]).await?;
            let have = q.first().and_then(|r| r.first()).map(int).unwrap_or(0);
            if have < int(&args[2]) {
                return Err(ctx.abort("out of stock"));
            }
            ctx.exec("line", args).await?;
            Ok(vec![])
        });
    // order(cart): every line's quantity taken from the stock.
    let order = ProcedureDef::new("order")
        .statement(
            "lines",
            "SELECT item, qty FROM cart_line WHERE cart = $cart",
        )
        .statement(
            "take",
            "UPDATE stock SET qty = qty - $qty WHERE item = $item",
        )
        .body(|mut ctx, args| async move {
            let lines = ctx.exec("lines", args).await?;
            for row in &lines.rows {
                ctx.exec("take", vec![row[1].clone(), row[0].clone()])
                    .await?;
            }
            Ok(vec![Value::Int(lines.len() as i64)])
        });
    // stock_at(item, server): the stock as one server's replica has it
    // (routed by its second argument, for the test).
    let stock_at = ProcedureDef::new("stock_at")
        .statement("stock", "SELECT qty FROM stock WHERE item = $item")
        .body(|mut ctx, args| async move {
            let q = ctx.exec("stock", vec![args[0].clone()]).await?;
            Ok(q.first().map(|r| r.to_vec()).unwrap_or_default())
        });
    // lines_at(cart, server): the cart's lines at one server's replica.
    let lines_at = ProcedureDef::new("lines_at")
        .statement("lines", "SELECT item FROM cart_line WHERE cart = $cart")
        .body(|mut ctx, args| async move {
            let q = ctx.exec("lines", vec![args[0].clone()]).await?;
            Ok(vec![Value::Int(q.len() as i64)])
        });
    Application {
        name: "store".into(),
        ddl: DDL.into(),
        procedures: vec![create, add, order, stock_at, lines_at],
    }
}

pub fn routes() -> Routes {
    Routes::new()
        .with("create", Class::Local, &[0])
        .with("add", Class::Local, &[0])
        .with("order", Class::Global, &[0])
        .with("stock_at", Class::Local, &[1])
        .with("lines_at", Class::Local, &[1])
}
