//! RUBiS's eight tables as brine DDL, and the column order the data
//! generator writes rows in.
//!
//! Partitioning (the reasoning is in `docs/workloads/rubis.md`):
//!
//! ```text
//!  items, old_items   by id        store_bid, store_buy_now: one partition
//!  bids, buy_now      by item_id   (the item's), with the item row
//!  comments           by to_user_id  store_comment: one partition, with
//!  users              by id          the rated user's row
//!  categories, regions by id       read whole (broadcast), never written
//! ```
//!
//! Deviations from RUBiS's schema, each forced by the engine or by the
//! checks, and documented in `docs/workloads/rubis.md`:
//!
//! * Every table has a primary key; `bids`, `buy_now` and `comments` key
//!   on (partitioning column, id) so a row lives with its item or user.
//! * `items` and `old_items` carry the seller's `region` (copied when the
//!   item is registered): the engine has no joins, and RUBiS's search by
//!   region joins items with users on the seller.
//! * `items` and `old_items` carry `initial_quantity` (the quantity
//!   offered), which the buy-now check compares with what was bought.
//! * Columns whose names are SQL keywords are renamed (`date` becomes
//!   `bid_date`, `bn_date`, `c_date`; `comment` becomes `text`).

/// The schema. Column order here is the order rows are generated in.
pub const DDL: &str = "
CREATE TABLE categories (
    id INT, name VARCHAR(50) NOT NULL,
    PRIMARY KEY (id)
) PARTITION BY (id);

CREATE TABLE regions (
    id INT, name VARCHAR(25) NOT NULL,
    PRIMARY KEY (id)
) PARTITION BY (id);

CREATE TABLE users (
    id INT, firstname VARCHAR(20) NOT NULL, lastname VARCHAR(20) NOT NULL,
    nickname VARCHAR(30) NOT NULL, password VARCHAR(30) NOT NULL, email VARCHAR(50) NOT NULL,
    rating INT NOT NULL, balance DECIMAL(10,2) NOT NULL, creation_date TIMESTAMP NOT NULL,
    region INT NOT NULL,
    PRIMARY KEY (id)
) PARTITION BY (id);
CREATE INDEX users_by_nickname ON users (nickname);

CREATE TABLE items (
    id INT, name VARCHAR(100) NOT NULL, description VARCHAR(255) NOT NULL,
    initial_price DECIMAL(10,2) NOT NULL, quantity INT NOT NULL, initial_quantity INT NOT NULL,
    reserve_price DECIMAL(10,2) NOT NULL, buy_now DECIMAL(10,2) NOT NULL, nb_of_bids INT NOT NULL,
    max_bid DECIMAL(10,2) NOT NULL, start_date TIMESTAMP NOT NULL, end_date TIMESTAMP NOT NULL,
    seller INT NOT NULL, category INT NOT NULL, region INT NOT NULL,
    PRIMARY KEY (id)
) PARTITION BY (id);
CREATE INDEX items_by_category ON items (category, id);
CREATE INDEX items_by_region ON items (region, category, id);
CREATE INDEX items_by_seller ON items (seller, id);

CREATE TABLE old_items (
    id INT, name VARCHAR(100) NOT NULL, description VARCHAR(255) NOT NULL,
    initial_price DECIMAL(10,2) NOT NULL, quantity INT NOT NULL, initial_quantity INT NOT NULL,
    reserve_price DECIMAL(10,2) NOT NULL, buy_now DECIMAL(10,2) NOT NULL, nb_of_bids INT NOT NULL,
    max_bid DECIMAL(10,2) NOT NULL, start_date TIMESTAMP NOT NULL, end_date TIMESTAMP NOT NULL,
    seller INT NOT NULL, category INT NOT NULL, region INT NOT NULL,
    PRIMARY KEY (id)
) PARTITION BY (id);
CREATE INDEX old_items_by_seller ON old_items (seller, id);

CREATE TABLE bids (
    item_id INT, id INT, user_id INT NOT NULL, qty INT NOT NULL, bid DECIMAL(10,2) NOT NULL,
    max_bid DECIMAL(10,2) NOT NULL, bid_date TIMESTAMP NOT NULL,
    PRIMARY KEY (item_id, id)
) PARTITION BY (item_id);
CREATE INDEX bids_by_user ON bids (user_id, item_id, id);

CREATE TABLE buy_now (
    item_id INT, id INT, buyer_id INT NOT NULL, qty INT NOT NULL, bn_date TIMESTAMP NOT NULL,
    PRIMARY KEY (item_id, id)
) PARTITION BY (item_id);
CREATE INDEX buy_now_by_buyer ON buy_now (buyer_id, item_id, id);

CREATE TABLE comments (
    to_user_id INT, id INT, from_user_id INT NOT NULL, item_id INT NOT NULL, rating INT NOT NULL,
    c_date TIMESTAMP NOT NULL, text VARCHAR(255) NOT NULL,
    PRIMARY KEY (to_user_id, id)
) PARTITION BY (to_user_id);
";

pub const CATEGORIES: &str = "categories";
pub const REGIONS: &str = "regions";
pub const USERS: &str = "users";
pub const ITEMS: &str = "items";
pub const OLD_ITEMS: &str = "old_items";
pub const BIDS: &str = "bids";
pub const BUY_NOW: &str = "buy_now";
pub const COMMENTS: &str = "comments";

/// Every table, in load order.
pub const TABLES: [&str; 8] = [
    CATEGORIES, REGIONS, USERS, ITEMS, OLD_ITEMS, BIDS, BUY_NOW, COMMENTS,
];

/// Column counts, asserted by the generator's tests.
pub const COLUMNS_USERS: usize = 10;
pub const COLUMNS_ITEMS: usize = 15;
pub const COLUMNS_BIDS: usize = 7;
pub const COLUMNS_BUY_NOW: usize = 5;
pub const COLUMNS_COMMENTS: usize = 7;
