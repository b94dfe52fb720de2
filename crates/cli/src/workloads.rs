//! `brine bench`'s workloads, built from the command line: each sweep
//! list (`--rows`, `--read-ratio`, ...) a variant per value, and options
//! refused for a workload that has no use for them.

use super::*;

/// The workload variants `args` asks for.
pub(crate) fn workloads_from(args: &BenchArgs) -> Result<Vec<Arc<dyn Workload>>, BenchError> {
    let only = |given: bool, flag: &str, workload: &str| {
        if given {
            Err(BenchError::Config(format!(
                "{flag} applies to the {workload} workload only"
            )))
        } else {
            Ok(())
        }
    };
    if !matches!(
        args.workload,
        WorkloadName::Tpcc | WorkloadName::Tpcw | WorkloadName::Rubis
    ) {
        only(args.mix.is_some(), "--mix", "tpcc, tpcw and rubis")?;
    }
    if !matches!(args.workload, WorkloadName::Tpcw | WorkloadName::Rubis) {
        only(args.scale.is_some(), "--scale", "tpcw and rubis")?;
    }
    // TPC-W and RUBiS: no rows or accounts.
    let web_refusals = || {
        only(args.rows.is_some(), "--rows", "micro")?;
        only(args.accounts.is_some(), "--accounts", "bank")?;
        only(args.total_percent.is_some(), "--total-percent", "bank")
    };
    if args.workload != WorkloadName::Tpcc {
        only(args.warehouses.is_some(), "--warehouses", "tpcc")?;
        only(args.tpcc_scale.is_some(), "--tpcc-scale", "tpcc")?;
        only(args.delivery.is_some(), "--delivery", "tpcc")?;
        only(args.tpcc_order.is_some(), "--tpcc-order", "tpcc")?;
        only(
            args.stock_level_isolation.is_some(),
            "--stock-level-isolation",
            "tpcc",
        )?;
    }
    if args.workload != WorkloadName::Ticket {
        only(args.seats.is_some(), "--seats", "ticket")?;
        only(args.customers.is_some(), "--customers", "ticket")?;
        only(
            args.abandon_percent.is_some(),
            "--abandon-percent",
            "ticket",
        )?;
        only(args.delete_percent.is_some(), "--delete-percent", "ticket")?;
    }
    if !matches!(
        args.workload,
        WorkloadName::Register | WorkloadName::ListAppend | WorkloadName::Ycsb
    ) {
        only(
            args.keys.is_some(),
            "--keys",
            "register, list-append and ycsb",
        )?;
    }
    if args.workload != WorkloadName::Ycsb {
        only(args.read_ratio.is_some(), "--read-ratio", "ycsb")?;
        only(args.native_ratio.is_some(), "--native-ratio", "ycsb")?;
        only(args.txn_size.is_some(), "--txn-size", "ycsb")?;
        only(args.distribution.is_some(), "--distribution", "ycsb")?;
    }
    if args.workload != WorkloadName::Micro2 {
        only(args.position.is_some(), "--position", "micro2")?;
    }
    if args.workload != WorkloadName::Micro3 {
        only(
            args.read_only_percent.is_some(),
            "--read-only-percent",
            "micro3",
        )?;
    }
    if args.workload != WorkloadName::Intergroup {
        only(args.ratio.is_some(), "--ratio", "intergroup")?;
        only(args.conflict_bp.is_some(), "--conflict-bp", "intergroup")?;
    }
    if args.workload != WorkloadName::Rollback {
        only(
            args.rollback_percent.is_some(),
            "--rollback-percent",
            "rollback",
        )?;
    }
    if args.workload != WorkloadName::App {
        only(args.app.is_some(), "--app", "app")?;
    }
    if args.workload != WorkloadName::EliaMicro {
        only(
            args.local_percent.is_some(),
            "--local-percent",
            "elia-micro",
        )?;
        only(args.op_ms.is_some(), "--op-ms", "elia-micro")?;
    }
    // --base: procedure names of the workload that can be BASE.
    let base = |known: &[&'static str]| -> Result<Option<BaseSet>, BenchError> {
        args.base
            .as_deref()
            .map(|list| BaseSet::parse(list, known))
            .transpose()
    };
    match args.workload {
        WorkloadName::Register | WorkloadName::ListAppend => {
            only(args.rows.is_some(), "--rows", "micro")?;
            only(args.accounts.is_some(), "--accounts", "bank")?;
            only(args.total_percent.is_some(), "--total-percent", "bank")?;
            let keys = args.keys.unwrap_or(checking::DEFAULT_KEYS);
            Ok(vec![if args.workload == WorkloadName::Register {
                let w = Register::new(keys)?;
                Arc::new(match base(&checking::REGISTER_BASE_CAPABLE)? {
                    Some(b) => w.with_base(b),
                    None => w,
                })
            } else {
                let w = ListAppend::new(keys)?;
                Arc::new(match base(&checking::LIST_APPEND_BASE_CAPABLE)? {
                    Some(b) => w.with_base(b),
                    None => w,
                })
            }])
        }
        WorkloadName::Ticket => {
            only(args.rows.is_some(), "--rows", "micro")?;
            only(args.accounts.is_some(), "--accounts", "bank")?;
            only(args.total_percent.is_some(), "--total-percent", "bank")?;
            let w = Ticket::new(TicketParams {
                seats_per_category: args.seats.unwrap_or(ticket::DEFAULT_SEATS_PER_CATEGORY),
                customers: args.customers.unwrap_or(ticket::DEFAULT_CUSTOMERS),
                abandon_percent: args
                    .abandon_percent
                    .unwrap_or(ticket::DEFAULT_ABANDON_PERCENT),
                delete_percent: args
                    .delete_percent
                    .unwrap_or(ticket::DEFAULT_DELETE_PERCENT),
                ..TicketParams::default()
            })?;
            let w = match base(&ticket::procedures::BASE_CAPABLE)? {
                Some(b) => w.with_base(b),
                None => w,
            };
            Ok(vec![Arc::new(w)])
        }
        WorkloadName::Tpcc => {
            only(args.rows.is_some(), "--rows", "micro")?;
            only(args.accounts.is_some(), "--accounts", "bank")?;
            only(args.total_percent.is_some(), "--total-percent", "bank")?;
            let w = Tpcc::new(
                args.warehouses.unwrap_or(tpcc::DEFAULT_WAREHOUSES),
                tpcc::Scale::by_name(args.tpcc_scale.as_deref().unwrap_or("standard"))?,
                tpcc::Mix::by_name(args.mix.as_deref().unwrap_or("standard"))?,
            )?
            .with_delivery(tpcc::Delivery::by_name(
                args.delivery.as_deref().unwrap_or("deferred"),
            )?)
            .with_order(
                tpcc::procedures::StatementOrder::by_name(
                    args.tpcc_order.as_deref().unwrap_or("hot-last"),
                )
                .map_err(|e| BenchError::Config(e.to_string()))?,
            )
            .with_stock_level_isolation(
                args.stock_level_isolation
                    .as_deref()
                    .unwrap_or("read-committed")
                    .parse()
                    .map_err(|e: brine_core::Error| {
                        BenchError::Config(format!("--stock-level-isolation: {e}"))
                    })?,
            )
            .with_measure_window(
                seconds(args.warmup, "--warmup")?,
                seconds(args.duration, "--duration")?,
            );
            let w = match base(&tpcc::PROCEDURES)? {
                Some(b) => w.with_base(b),
                None => w,
            };
            Ok(vec![Arc::new(w)])
        }
        WorkloadName::Tpcw => {
            web_refusals()?;
            let w = Tpcw::new(
                tpcw::Scale::by_name(args.scale.as_deref().unwrap_or("standard"))?,
                tpcw::Mix::by_name(args.mix.as_deref().unwrap_or("shopping"))?,
            )?;
            let w = match base(&tpcw::procedures::BASE_CAPABLE)? {
                Some(b) => w.with_base(b),
                None => w,
            };
            Ok(vec![Arc::new(w)])
        }
        WorkloadName::Rubis => {
            use brine_bench::workloads::rubis::{self, Rubis};
            web_refusals()?;
            let w = Rubis::new(
                rubis::Scale::by_name(args.scale.as_deref().unwrap_or("standard"))?,
                rubis::Mix::by_name(args.mix.as_deref().unwrap_or("bidding"))?,
            )?;
            let w = match base(&rubis::procedures::BASE_CAPABLE)? {
                Some(b) => w.with_base(b),
                None => w,
            };
            Ok(vec![Arc::new(w)])
        }
        WorkloadName::Micro => {
            only(args.accounts.is_some(), "--accounts", "bank")?;
            only(args.total_percent.is_some(), "--total-percent", "bank")?;
            let rows = match &args.rows {
                Some(list) => {
                    parse_counts(list, "--rows", micro::MAX_ROWS).map_err(BenchError::Config)?
                }
                None => vec![micro::DEFAULT_ROWS],
            };
            let b = base(&micro::PROCEDURES)?;
            rows.into_iter()
                .map(|n| {
                    let m = Micro::new(n)?;
                    let m = match &b {
                        Some(b) => m.with_base(b.clone()),
                        None => m,
                    };
                    Ok(Arc::new(m) as Arc<dyn Workload>)
                })
                .collect()
        }
        WorkloadName::Micro2 => {
            only(args.rows.is_some(), "--rows", "micro and micro3")?;
            only(args.accounts.is_some(), "--accounts", "bank")?;
            only(args.total_percent.is_some(), "--total-percent", "bank")?;
            let positions = match &args.position {
                Some(list) => parse_counts(list, "--position", micro2::UPDATES_PER_TXN as u64)
                    .map_err(BenchError::Config)?,
                None => vec![micro2::DEFAULT_POSITION],
            };
            let b = base(&micro2::PROCEDURES)?;
            positions
                .into_iter()
                .map(|p| {
                    let m = Micro2::new(p)?;
                    let m = match &b {
                        Some(b) => m.with_base(b.clone()),
                        None => m,
                    };
                    Ok(Arc::new(m) as Arc<dyn Workload>)
                })
                .collect()
        }
        WorkloadName::Intergroup => {
            use brine_bench::workloads::intergroup;
            let ratios = match &args.ratio {
                Some(list) => parse_counts(list, "--ratio", intergroup::MAX_RATIO)
                    .map_err(BenchError::Config)?,
                None => vec![intergroup::DEFAULT_RATIO],
            };
            let bps = match &args.conflict_bp {
                Some(list) => {
                    parse_counts(list, "--conflict-bp", 10_000).map_err(BenchError::Config)?
                }
                None => vec![intergroup::DEFAULT_CONFLICT_BP],
            };
            let mut out: Vec<Arc<dyn Workload>> = Vec::new();
            for &r in &ratios {
                for &bp in &bps {
                    out.push(Arc::new(brine_bench::workloads::InterGroup::new(r, bp)?));
                }
            }
            Ok(out)
        }
        WorkloadName::EliaMicro => {
            use brine_bench::workloads::elia_micro::{self, EliaMicro};
            let percents = match &args.local_percent {
                Some(list) => {
                    parse_percents(list, "--local-percent").map_err(BenchError::Config)?
                }
                None => vec![elia_micro::DEFAULT_LOCAL_PERCENT],
            };
            let ms = args.op_ms.unwrap_or(elia_micro::DEFAULT_OP_MS);
            percents
                .into_iter()
                .map(|p| Ok(Arc::new(EliaMicro::new(p, ms)?) as Arc<dyn Workload>))
                .collect()
        }
        WorkloadName::App => {
            let path = args.app.as_ref().ok_or_else(|| {
                BenchError::Config("the app workload needs --app FILE (docs/apps.md)".into())
            })?;
            Ok(vec![
                Arc::new(brine_app::AppWorkload::open(path)?) as Arc<dyn Workload>
            ])
        }
        WorkloadName::Rollback => {
            let percents = match &args.rollback_percent {
                Some(list) => {
                    parse_percents(list, "--rollback-percent").map_err(BenchError::Config)?
                }
                None => vec![brine_bench::workloads::rollback::DEFAULT_ROLLBACK_PERCENT],
            };
            percents
                .into_iter()
                .map(|p| {
                    Ok(Arc::new(brine_bench::workloads::Rollback::new(p)?) as Arc<dyn Workload>)
                })
                .collect()
        }
        WorkloadName::Micro3 => {
            only(args.accounts.is_some(), "--accounts", "bank")?;
            only(args.total_percent.is_some(), "--total-percent", "bank")?;
            let rows = match &args.rows {
                Some(list) => {
                    parse_counts(list, "--rows", micro3::MAX_ROWS).map_err(BenchError::Config)?
                }
                None => vec![micro3::DEFAULT_ROWS],
            };
            let percents = match &args.read_only_percent {
                Some(list) => {
                    parse_percents(list, "--read-only-percent").map_err(BenchError::Config)?
                }
                None => vec![micro3::DEFAULT_READ_ONLY_PERCENT],
            };
            let b = base(&micro3::PROCEDURES)?;
            let mut out: Vec<Arc<dyn Workload>> = Vec::new();
            for &n in &rows {
                for &pct in &percents {
                    let m = Micro3::new(n, pct)?;
                    let m = match &b {
                        Some(b) => m.with_base(b.clone()),
                        None => m,
                    };
                    out.push(Arc::new(m));
                }
            }
            Ok(out)
        }
        WorkloadName::Ycsb => {
            use brine_bench::workloads::ycsb::{self, KeyDistribution, Ycsb};
            only(args.rows.is_some(), "--rows", "micro")?;
            let ratios = |list: &Option<String>, name: &str, default: f64| match list {
                Some(l) => parse_ratios(l, name).map_err(BenchError::Config),
                None => Ok(vec![default]),
            };
            let reads = ratios(&args.read_ratio, "--read-ratio", ycsb::DEFAULT_READ_RATIO)?;
            let natives = ratios(
                &args.native_ratio,
                "--native-ratio",
                ycsb::DEFAULT_NATIVE_RATIO,
            )?;
            let sizes = match &args.txn_size {
                Some(l) => parse_counts(l, "--txn-size", u64::from(ycsb::MAX_TXN_SIZE))
                    .map_err(BenchError::Config)?,
                None => vec![u64::from(ycsb::DEFAULT_TXN_SIZE)],
            };
            let dist = KeyDistribution::parse(args.distribution.as_deref().unwrap_or("zipfian"))?;
            let keys = args.keys.unwrap_or(ycsb::DEFAULT_KEYS);
            let mut out: Vec<Arc<dyn Workload>> = Vec::new();
            for &n in &sizes {
                for &rho in &reads {
                    for &nu in &natives {
                        out.push(Arc::new(Ycsb::new(keys, dist, rho, nu, n as u32)?));
                    }
                }
            }
            Ok(out)
        }
        WorkloadName::Bank => {
            only(args.rows.is_some(), "--rows", "micro")?;
            let bank = Bank::new(
                args.accounts.unwrap_or(bank::DEFAULT_ACCOUNTS),
                args.total_percent.unwrap_or(bank::DEFAULT_TOTAL_PERCENT),
            )?;
            let bank = match base(&bank::PROCEDURES)? {
                Some(b) => bank.with_base(b),
                None => bank,
            };
            Ok(vec![Arc::new(bank)])
        }
    }
}

/// An application file's own groupings that the protocols run
/// (`callas@LABEL`), unless the command line gives groupings.
pub(crate) fn app_groupings(
    args: &BenchArgs,
    protocols: &[String],
) -> Result<Vec<(String, brine_cluster::Grouping)>, BenchError> {
    let (WorkloadName::App, Some(path), true) =
        (args.workload, &args.app, args.grouping.is_empty())
    else {
        return Ok(Vec::new());
    };
    let file = brine_app::load(path).map_err(|e| BenchError::Config(e.to_string()))?;
    Ok(file
        .groupings
        .into_iter()
        .filter(|(label, _)| protocols.iter().any(|p| *p == format!("callas@{label}")))
        .collect())
}
