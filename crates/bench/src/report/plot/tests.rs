use super::*;
use crate::report::tests::point;
use crate::report::PointResult;
use serde_json::json;

const AXIS: [f64; 3] = [0.0, 0.5, 1.0];

/// The candidate/baseline ratios of operations per second of the synthetic
/// grid, `RATIOS[i][j]` at rho `AXIS[i]`, nu `AXIS[j]`:
/// rho=0 crosses 1 at nu=0.25 (log2 -1 to 1), rho=0.5 at nu=0.75,
/// rho=1 never does (the candidate wins at every nu).
const RATIOS: [[f64; 3]; 3] = [[0.5, 2.0, 4.0], [0.5, 0.5, 2.0], [1.25, 1.5, 3.0]];

fn ycsb_point(
    protocol: &str,
    pi: usize,
    variant: usize,
    clients: u32,
    (rho, nu): (f64, f64),
    tps: f64,
    per_call: f64,
) -> PointResult {
    let mut p = point(protocol, pi, variant, clients, tps);
    p.params = Map::new();
    for (k, v) in [
        ("keys", json!(1000)),
        ("distribution", json!("uniform")),
        ("read_ratio", json!(rho)),
        ("native_ratio", json!(nu)),
        ("txn_size", json!("U4")),
    ] {
        p.params.insert(k.into(), v);
    }
    p.workload_metrics = Map::new();
    p.workload_metrics
        .insert("operations_per_call".into(), json!(per_call));
    p
}

/// A 3x3 omid/mediator sweep at `clients` (each count in turn) with the
/// ratios `ratios(clients)`. The baseline does 2 operations per call, the
/// candidate 1: its calls per second are twice the ratio drawn, so a plot
/// of calls per second would show other numbers.
fn sweep(clients: &[u32], ratios: impl Fn(u32) -> [[f64; 3]; 3]) -> BenchReport {
    let mut results = Vec::new();
    for &c in clients {
        let r = ratios(c);
        for (i, &rho) in AXIS.iter().enumerate() {
            for (j, &nu) in AXIS.iter().enumerate() {
                let v = i * 3 + j;
                results.push(ycsb_point("omid", 0, v, c, (rho, nu), 1000.0, 2.0));
                results.push(ycsb_point(
                    "mediator",
                    1,
                    v,
                    c,
                    (rho, nu),
                    2000.0 * r[i][j],
                    1.0,
                ));
            }
        }
    }
    let mut config = Map::new();
    config.insert("protocols".into(), json!(["omid", "mediator"]));
    config.insert("durability".into(), json!(["none"]));
    config.insert("clients".into(), json!(clients));
    BenchReport::new("ycsb", config, results)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn log_ratio_interpolation_finds_the_crossing() {
    // log2: -1 at nu=0, +1 at nu=1: halfway.
    assert_eq!(crossing_between(0.0, 0.5, 1.0, 2.0), Some(0.5));
    // -1 to +2: a third of the way (on the ratio itself it would be 1/7).
    let at = crossing_between(0.0, 0.5, 1.0, 4.0).unwrap_or(f64::NAN);
    assert!(close(at, 1.0 / 3.0), "{at}");
    // Falling through 1, on an interval not starting at 0.
    let at = crossing_between(0.25, 2.0, 0.75, 0.5).unwrap_or(f64::NAN);
    assert!(close(at, 0.5), "{at}");
    // Exactly 1 to above: the crossing is at the cell of ratio 1.
    assert_eq!(crossing_between(0.5, 1.0, 1.0, 3.0), Some(0.5));
    assert_eq!(crossing_between(0.0, 1.5, 1.0, 3.0), None);
    assert_eq!(crossing_between(0.0, 0.5, 1.0, 0.9), None);
}

#[test]
fn column_verdicts() {
    let nus = [0.0, 0.5, 1.0];
    match column_verdict(&nus, &[Some(0.5), Some(2.0), Some(0.5)]) {
        Verdict::Crosses(at) => {
            assert_eq!(at.len(), 2, "{at:?}");
            assert!(close(at[0], 0.25) && close(at[1], 0.75), "{at:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        column_verdict(&nus, &[Some(1.1), Some(3.0), Some(1.01)]),
        Verdict::CandidateAhead
    );
    assert_eq!(
        column_verdict(&nus, &[Some(0.9), Some(1.0), Some(0.2)]),
        Verdict::BaselineAhead
    );
    assert_eq!(
        column_verdict(&nus, &[Some(0.5), None, Some(2.0)]),
        Verdict::Undetermined
    );
}

#[test]
fn marching_squares_joins_the_column_crossings() {
    let axis = [0.0, 1.0];
    // Both columns cross at nu=0.5: one horizontal segment.
    let s = equilibrium_segments(
        &axis,
        &axis,
        &[vec![Some(0.5), Some(2.0)], vec![Some(0.5), Some(2.0)]],
    );
    assert_eq!(s.len(), 1, "{s:?}");
    let mut ends = s[0].to_vec();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(close(ends[0].0, 0.0) && close(ends[0].1, 0.5), "{ends:?}");
    assert!(close(ends[1].0, 1.0) && close(ends[1].1, 0.5), "{ends:?}");
    // Above 1 everywhere: nothing.
    let none = equilibrium_segments(
        &axis,
        &axis,
        &[vec![Some(1.5), Some(2.0)], vec![Some(1.1), Some(2.0)]],
    );
    assert!(none.is_empty());
    // A saddle (diagonal corners alike): two segments, no crossing drawn
    // through the centre.
    let saddle = equilibrium_segments(
        &axis,
        &axis,
        &[vec![Some(2.0), Some(0.5)], vec![Some(0.5), Some(2.0)]],
    );
    assert_eq!(saddle.len(), 2, "{saddle:?}");
}

#[test]
fn grid_draws_operations_per_second_at_the_largest_client_count() -> Result<()> {
    let report = sweep(&[8, 32], |c| if c == 32 { RATIOS } else { [[3.0; 3]; 3] });
    let g = grid_from_report(&report, &PlotOptions::default())?;
    assert_eq!(
        (g.baseline.as_str(), g.candidate.as_str()),
        ("omid", "mediator")
    );
    assert_eq!((g.clients, g.all_clients.clone()), (32, vec![8, 32]));
    assert_eq!(
        (g.rhos.clone(), g.nus.clone()),
        (AXIS.to_vec(), AXIS.to_vec())
    );
    for (i, row) in RATIOS.iter().enumerate() {
        for (j, &r) in row.iter().enumerate() {
            let got = g.cells[i][j].ratio().unwrap_or(f64::NAN);
            assert!(
                close(got, r),
                "rho {} nu {}: {got} (want {r})",
                AXIS[i],
                AXIS[j]
            );
            assert!(close(g.cells[i][j].baseline_ops, 2000.0));
        }
    }
    let eight = grid_from_report(&report, &PlotOptions { clients: Some(8) })?;
    assert_eq!(eight.clients, 8);
    assert!(close(eight.cells[1][1].ratio().unwrap_or(0.0), 3.0));
    // The JSON of the report draws the same.
    let json: Json = serde_json::from_str(&report.to_json().map_err(|e| plot_err(e.to_string()))?)
        .map_err(|e| plot_err(e.to_string()))?;
    assert_eq!(grid_from_json(&json, &PlotOptions::default())?, g);
    Ok(())
}

/// The `<tag ...attrs>text</tag>` elements of class `class` in `svg`, as
/// (data-rho, data-nu, text): the tests read the SVG as a viewer would
/// find its labels.
fn labelled(svg: &str, tag: &str, class: &str) -> Vec<(String, String, String)> {
    let attr = |el: &str, name: &str| {
        el.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|t| t.split('"').next())
            .unwrap_or("")
            .to_string()
    };
    svg.split(&format!("<{tag} class=\"{class}\""))
        .skip(1)
        .map(|el| {
            let text = el
                .split_once('>')
                .map(|(_, t)| t.split('<').next().unwrap_or(""))
                .unwrap_or("");
            (attr(el, "data-rho"), attr(el, "data-nu"), text.to_string())
        })
        .collect()
}

#[test]
fn svg_labels_every_cell_and_marks_the_equilibrium() -> Result<()> {
    let svg = svg_of_report(&sweep(&[32], |_| RATIOS), &PlotOptions::default())?;
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    let labels = labelled(&svg, "text", "ratio");
    assert_eq!(labels.len(), 9, "{labels:?}");
    let names = ["0", "0.5", "1"];
    for (i, row) in RATIOS.iter().enumerate() {
        for (j, &r) in row.iter().enumerate() {
            let want = (
                names[i].to_string(),
                names[j].to_string(),
                format!("{r:.2}"),
            );
            assert!(labels.contains(&want), "no {want:?} in {labels:?}");
        }
    }
    assert_eq!(labelled(&svg, "rect", "cell").len(), 9);
    // Blue above 1, red below, white at 1 would be #ffffff.
    assert!(svg.contains("data-rho=\"1\" data-nu=\"1\"") && svg.contains("fill=\"#"));

    let mut dots: Vec<(String, String)> = labelled(&svg, "circle", "crossing")
        .into_iter()
        .map(|(rho, nu, _)| (rho, nu))
        .collect();
    dots.sort();
    assert_eq!(
        dots,
        vec![("0".into(), "0.25".into()), ("0.5".into(), "0.75".into())]
    );
    assert!(svg.contains("<path class=\"equilibrium\" d=\"M"));
    assert!(svg.contains("rho=0: the ratio crosses 1 at nu=0.25"));
    assert!(svg.contains("rho=0.5: the ratio crosses 1 at nu=0.75"));
    assert!(svg.contains("rho=1: never crosses 1, mediator wins at every nu"));
    assert!(svg.contains("ycsb U4, 1000 keys, uniform, 32 clients: mediator vs omid"));
    assert!(svg.contains("rho = read ratio") && svg.contains("nu = native ratio"));
    Ok(())
}

#[test]
fn a_grid_won_everywhere_has_no_curve_and_says_so() -> Result<()> {
    let svg = svg_of_report(&sweep(&[32], |_| [[0.5; 3]; 3]), &PlotOptions::default())?;
    assert!(!svg.contains("class=\"equilibrium\""));
    assert!(!svg.contains("class=\"crossing\""));
    assert!(svg.contains("rho=0.5: never crosses 1, omid wins (or ties) at every nu"));
    assert!(svg.contains("no equilibrium inside the grid"));
    Ok(())
}

fn plot_error(r: Result<Grid>) -> String {
    match r {
        Err(BenchError::Plot(m)) => m,
        Err(other) => panic!("not a plot error: {other}"),
        Ok(g) => panic!("plotted: {g:?}"),
    }
}

#[test]
fn reports_that_are_not_such_a_sweep_are_refused() {
    let opts = PlotOptions::default();
    // One protocol.
    let mut one = sweep(&[32], |_| RATIOS);
    one.results.retain(|r| r.protocol == "omid");
    let m = plot_error(grid_from_report(&one, &opts));
    assert!(m.contains("two protocols"), "{m}");

    // Three protocols.
    let mut three = sweep(&[32], |_| RATIOS);
    let mut extra = three.results[0].clone();
    extra.protocol = "acid".into();
    three.results.push(extra);
    let m = plot_error(grid_from_report(&three, &opts));
    assert!(m.contains("two protocols") && m.contains("acid"), "{m}");

    // A sweep over something else (micro's rows).
    let micro = BenchReport::new(
        "micro",
        Map::new(),
        vec![point("acid", 0, 0, 8, 10.0), point("salt", 1, 0, 8, 20.0)],
    );
    let m = plot_error(grid_from_report(&micro, &opts));
    assert!(m.contains("read_ratio"), "{m}");

    // A third parameter swept too.
    let mut sizes = sweep(&[32], |_| RATIOS);
    sizes.results[0]
        .params
        .insert("txn_size".into(), json!("U8"));
    let m = plot_error(grid_from_report(&sizes, &opts));
    assert!(m.contains("txn_size") && m.contains("U8"), "{m}");

    // One nu only.
    let mut flat = sweep(&[32], |_| RATIOS);
    flat.results
        .retain(|r| r.params.get("native_ratio") == Some(&json!(0.5)));
    let m = plot_error(grid_from_report(&flat, &opts));
    assert!(
        m.contains("native_ratio") && m.contains("at least two"),
        "{m}"
    );

    // A hole in the grid.
    let mut holed = sweep(&[32], |_| RATIOS);
    holed.results.remove(3);
    let m = plot_error(grid_from_report(&holed, &opts));
    assert!(m.contains("not a full grid"), "{m}");

    // No operations counter (calls are not operations).
    let mut calls = sweep(&[32], |_| RATIOS);
    calls.results[5].workload_metrics = Map::new();
    let m = plot_error(grid_from_report(&calls, &opts));
    assert!(m.contains("operations_per_call"), "{m}");

    // A client count the report does not have.
    let m = plot_error(grid_from_report(
        &sweep(&[8, 32], |_| RATIOS),
        &PlotOptions { clients: Some(16) },
    ));
    assert!(m.contains("16 clients") && m.contains("8, 32"), "{m}");

    // Not a report at all.
    let m = plot_error(grid_from_json(&json!({"results": []}), &opts));
    assert!(m.contains("workload"), "{m}");
}

#[test]
fn runs_that_cannot_be_plotted_are_refused_before_they_start() {
    let variants: Vec<Map<String, Json>> = AXIS
        .iter()
        .flat_map(|&rho| {
            AXIS.iter().map(move |&nu| {
                let mut m = Map::new();
                m.insert("read_ratio".into(), json!(rho));
                m.insert("native_ratio".into(), json!(nu));
                m.insert("txn_size".into(), json!("U4"));
                m
            })
        })
        .collect();
    let two = ["omid".to_string(), "mediator".to_string()];
    assert!(check_sweep(&two, 1, &variants).is_ok());
    let err = |r: Result<()>| match r {
        Err(BenchError::Plot(m)) => m,
        other => panic!("{other:?}"),
    };
    let m = err(check_sweep(&two[..1], 1, &variants));
    assert!(m.contains("--compare"), "{m}");
    let acid = ["acid@wait-die", "acid@detect", "mediator"].map(String::from);
    let m = err(check_sweep(&acid, 1, &variants));
    assert!(m.contains("--baseline acid@wait-die"), "{m}");
    let m = err(check_sweep(&two, 2, &variants));
    assert!(m.contains("durability"), "{m}");
    let m = err(check_sweep(&two, 1, &variants[..3]));
    assert!(m.contains("read_ratio"), "{m}");
    let mut sizes = variants.clone();
    sizes[4].insert("txn_size".into(), json!("U8"));
    let m = err(check_sweep(&two, 1, &sizes));
    assert!(m.contains("txn_size"), "{m}");
    let rows = vec![Map::from_iter([("rows".to_string(), json!(10))])];
    let m = err(check_sweep(&two, 1, &rows));
    assert!(m.contains("read_ratio"), "{m}");
}

#[test]
fn extreme_ratios_saturate_the_scale() -> Result<()> {
    let huge = [[1e30, 1e-30, 2.0], [1.0, 1.0, 1.0], [3.0, 3.0, 3.0]];
    let svg = svg_of_report(&sweep(&[32], |_| huge), &PlotOptions::default())?;
    // The scale stops at 2^16 either way, ticks every 2^4.
    assert!(svg.contains(">65536</text>") && svg.contains(">1/65536</text>"));
    assert!(svg.contains(">4096</text>") && !svg.contains(">2</text>"));
    Ok(())
}
