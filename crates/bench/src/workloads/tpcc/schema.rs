//! The nine TPC-C tables (clause 1.3) as brine DDL, and the column order
//! the data generator writes rows in.
//!
//! Every table is partitioned by its warehouse column, so a warehouse's
//! rows all live on partition `w_id mod P`. Deviations from clause 1.3,
//! each forced by the engine and documented in `docs/workloads/tpcc.md`:
//!
//! * `order` is named `orders` (ORDER is an SQL keyword).
//! * ITEM gets a warehouse column `i_w_id` and one copy per warehouse
//!   ("replicated ITEM"): the engine has no replicated tables, and the copy
//!   keeps every item read on the home warehouse's partition.
//! * HISTORY has no primary key in the spec; here it is
//!   `(h_w_id, h_d_id, h_id)` with `h_id` unique per row (made by the
//!   client that issues the payment), which also lets the checks sum
//!   `h_amount` per district with one range read.
//! * Column types map to brine's: NUMERIC(p,s) to DECIMAL(p,s), integer
//!   identifiers and counts to INT, dates to TIMESTAMP, character columns to
//!   VARCHAR(n).

/// The schema. Column order here is the order rows are generated in.
pub const DDL: &str = "
CREATE TABLE warehouse (
    w_id INT, w_name VARCHAR(10) NOT NULL, w_street_1 VARCHAR(20) NOT NULL,
    w_street_2 VARCHAR(20) NOT NULL, w_city VARCHAR(20) NOT NULL, w_state CHAR(2) NOT NULL,
    w_zip CHAR(9) NOT NULL, w_tax DECIMAL(4,4) NOT NULL, w_ytd DECIMAL(12,2) NOT NULL,
    PRIMARY KEY (w_id)
) PARTITION BY (w_id);

CREATE TABLE district (
    d_w_id INT, d_id INT, d_name VARCHAR(10) NOT NULL, d_street_1 VARCHAR(20) NOT NULL,
    d_street_2 VARCHAR(20) NOT NULL, d_city VARCHAR(20) NOT NULL, d_state CHAR(2) NOT NULL,
    d_zip CHAR(9) NOT NULL, d_tax DECIMAL(4,4) NOT NULL, d_ytd DECIMAL(12,2) NOT NULL,
    d_next_o_id INT NOT NULL,
    PRIMARY KEY (d_w_id, d_id)
) PARTITION BY (d_w_id);

CREATE TABLE customer (
    c_w_id INT, c_d_id INT, c_id INT, c_first VARCHAR(16) NOT NULL, c_middle CHAR(2) NOT NULL,
    c_last VARCHAR(16) NOT NULL, c_street_1 VARCHAR(20) NOT NULL, c_street_2 VARCHAR(20) NOT NULL,
    c_city VARCHAR(20) NOT NULL, c_state CHAR(2) NOT NULL, c_zip CHAR(9) NOT NULL,
    c_phone CHAR(16) NOT NULL, c_since TIMESTAMP NOT NULL, c_credit CHAR(2) NOT NULL,
    c_credit_lim DECIMAL(12,2) NOT NULL, c_discount DECIMAL(4,4) NOT NULL,
    c_balance DECIMAL(12,2) NOT NULL, c_ytd_payment DECIMAL(12,2) NOT NULL,
    c_payment_cnt INT NOT NULL, c_delivery_cnt INT NOT NULL, c_data VARCHAR(500) NOT NULL,
    PRIMARY KEY (c_w_id, c_d_id, c_id)
) PARTITION BY (c_w_id);
CREATE INDEX customer_by_name ON customer (c_w_id, c_d_id, c_last, c_first);

CREATE TABLE history (
    h_w_id INT, h_d_id INT, h_id INT, h_c_id INT NOT NULL, h_c_d_id INT NOT NULL,
    h_c_w_id INT NOT NULL, h_date TIMESTAMP NOT NULL, h_amount DECIMAL(6,2) NOT NULL,
    h_data VARCHAR(24) NOT NULL,
    PRIMARY KEY (h_w_id, h_d_id, h_id)
) PARTITION BY (h_w_id);

CREATE TABLE new_order (
    no_w_id INT, no_d_id INT, no_o_id INT,
    PRIMARY KEY (no_w_id, no_d_id, no_o_id)
) PARTITION BY (no_w_id);

CREATE TABLE orders (
    o_w_id INT, o_d_id INT, o_id INT, o_c_id INT NOT NULL, o_entry_d TIMESTAMP NOT NULL,
    o_carrier_id INT, o_ol_cnt INT NOT NULL, o_all_local INT NOT NULL,
    PRIMARY KEY (o_w_id, o_d_id, o_id)
) PARTITION BY (o_w_id);
CREATE INDEX orders_by_customer ON orders (o_w_id, o_d_id, o_c_id, o_id);

CREATE TABLE order_line (
    ol_w_id INT, ol_d_id INT, ol_o_id INT, ol_number INT, ol_i_id INT NOT NULL,
    ol_supply_w_id INT NOT NULL, ol_delivery_d TIMESTAMP, ol_quantity INT NOT NULL,
    ol_amount DECIMAL(6,2) NOT NULL, ol_dist_info CHAR(24) NOT NULL,
    PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number)
) PARTITION BY (ol_w_id);

CREATE TABLE item (
    i_w_id INT, i_id INT, i_im_id INT NOT NULL, i_name VARCHAR(24) NOT NULL,
    i_price DECIMAL(5,2) NOT NULL, i_data VARCHAR(50) NOT NULL,
    PRIMARY KEY (i_w_id, i_id)
) PARTITION BY (i_w_id);

CREATE TABLE stock (
    s_w_id INT, s_i_id INT, s_quantity INT NOT NULL,
    s_dist_01 CHAR(24) NOT NULL, s_dist_02 CHAR(24) NOT NULL, s_dist_03 CHAR(24) NOT NULL,
    s_dist_04 CHAR(24) NOT NULL, s_dist_05 CHAR(24) NOT NULL, s_dist_06 CHAR(24) NOT NULL,
    s_dist_07 CHAR(24) NOT NULL, s_dist_08 CHAR(24) NOT NULL, s_dist_09 CHAR(24) NOT NULL,
    s_dist_10 CHAR(24) NOT NULL, s_ytd INT NOT NULL, s_order_cnt INT NOT NULL,
    s_remote_cnt INT NOT NULL, s_data VARCHAR(50) NOT NULL,
    PRIMARY KEY (s_w_id, s_i_id)
) PARTITION BY (s_w_id);
";

pub const WAREHOUSE: &str = "warehouse";
pub const DISTRICT: &str = "district";
pub const CUSTOMER: &str = "customer";
pub const HISTORY: &str = "history";
pub const NEW_ORDER: &str = "new_order";
pub const ORDERS: &str = "orders";
pub const ORDER_LINE: &str = "order_line";
pub const ITEM: &str = "item";
pub const STOCK: &str = "stock";

/// Every table, in load order.
pub const TABLES: [&str; 9] = [
    WAREHOUSE, DISTRICT, CUSTOMER, HISTORY, NEW_ORDER, ORDERS, ORDER_LINE, ITEM, STOCK,
];

/// Districts per warehouse (clause 1.2, fixed by the spec at every scale).
pub const DISTRICTS: i64 = 10;

/// Column counts, asserted by the generator's tests against the catalog.
pub const COLUMNS_WAREHOUSE: usize = 9;
pub const COLUMNS_DISTRICT: usize = 11;
pub const COLUMNS_CUSTOMER: usize = 21;
pub const COLUMNS_HISTORY: usize = 9;
pub const COLUMNS_NEW_ORDER: usize = 3;
pub const COLUMNS_ORDERS: usize = 8;
pub const COLUMNS_ORDER_LINE: usize = 10;
pub const COLUMNS_ITEM: usize = 6;
pub const COLUMNS_STOCK: usize = 17;
