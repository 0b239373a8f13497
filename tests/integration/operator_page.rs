//! The operator's page in a real browser (headless Chromium) against a running service with
//! real Spark Connect runs.

use crate::support;
use crate::support::warm_stack::*;

use std::time::Duration;

use support::{wait_until, Icepack};

/// Issue 20: the operator's page in a real browser (headless Chromium) against a running service
/// with real runs: a table compacted through Spark, one whose runs fail (its Iceberg table does
/// not exist), one with a few small files below its threshold. What a person would see: the
/// rows and their outcomes, the failure's class, the filter, a table's chart with its run
/// marked and its history, the next run's plan, the tenants; no token anywhere; screenshots for
/// the README.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local stack: make test, or deploy/local/with-stack.sh cargo test -- --include-ignored"]
async fn the_operator_page_in_a_real_browser_shows_tables_runs_failures_and_the_chart() {
    let test = "the_operator_page_in_a_real_browser_shows_tables_runs_failures_and_the_chart";
    if !connect_available(test) || !support::browser::available(test) {
        return;
    }
    use support::browser::{count, element, rendered, screenshot};
    let _alone = HEAVY.write().await;
    let stack = Stack::start(None).await;
    let (moto, queue_url, bucket, server, writer) = stack.parts();
    let orders = stack.table("lakehouse", "analytics.orders");
    let clicks = stack.table("clicks", "analytics.clicks");
    let refunds = stack.table("refunds", "analytics.refunds");
    let mut setup = create(&orders);
    setup.extend(inserts(&orders.qualified(), 0, 12));
    orders.sql(writer, &setup).await;
    let mut setup = create(&clicks);
    setup.extend(inserts(&clicks.qualified(), 0, 3));
    clicks.sql(writer, &setup).await;

    let port = support::free_port();
    let mut icepack = Icepack::with_config(&config(
        moto,
        queue_url,
        bucket,
        &server.url,
        &format!("127.0.0.1:{port}"),
        &[&orders, &clicks, &refunds],
    ));
    icepack.env = vec![("ICEPACK_API_TOKEN".to_string(), "PAGETOKEN".to_string())];
    let run = icepack.spawn_run("");
    // Small files announced for a table the catalog does not have: its runs fail.
    for n in 0..10 {
        moto.put_object(
            bucket,
            &format!("warehouse/analytics/refunds/data/0000{n}-0-x.parquet"),
            1024,
        )
        .await;
    }
    let compacted = success_after(&icepack, orders.name, "").await;
    let failed = wait_until(
        "a failed run of analytics.refunds",
        Duration::from_secs(120),
        || {
            let status = table_status(&icepack, refunds.name);
            async move { (status["last_run"]["outcome"] == "failure").then_some(status) }
        },
    )
    .await;
    let class = failed["last_run"]["failure_class"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until("the clicks to be counted", Duration::from_secs(60), || {
        let status = table_status(&icepack, clicks.name);
        async move { (status["pending_files"] == 3).then_some(()) }
    })
    .await;

    let base = format!("http://127.0.0.1:{port}");
    let overview = rendered(&format!("{base}/#/"));
    assert_eq!(
        count(&overview, "tr", "data-table="),
        3,
        "three rows:\n{overview}"
    );
    let row = |dom: &str, table: &str| {
        element(dom, "tr", &format!("data-table=\"{table}\""))
            .unwrap_or_else(|| panic!("no row of {table}:\n{overview}"))
            .to_string()
    };
    let orders_row = row(&overview, orders.name);
    assert!(orders_row.contains("pill ok"), "{orders_row}");
    let refunds_row = row(&overview, refunds.name);
    assert!(
        refunds_row.contains("failing") && refunds_row.contains(&format!(">{class}<")),
        "the failure's class on its row: {refunds_row}"
    );
    let clicks_row = row(&overview, clicks.name);
    assert!(
        clicks_row.contains(">3<") && clicks_row.contains(">never<"),
        "{clicks_row}"
    );
    // Read-only without the token: the page never has it, and asks for it.
    assert!(overview.contains("API token"), "{overview}");

    // The server filters: only the failing table.
    let failing = rendered(&format!("{base}/#/?state=failing"));
    assert_eq!(count(&failing, "tr", "data-table="), 1, "{failing}");
    assert!(element(&failing, "tr", refunds.name).is_some(), "{failing}");

    // A table: its chart with the run marked, its history, and the button that needs the token.
    let page = rendered(&format!("{base}/#/table/{}", orders.name));
    let chart = element(&page, "div", "id=\"chart\"").expect("a chart");
    let run_id = compacted["last_run"]["run_id"].as_str().unwrap();
    assert!(chart.contains("class=\"line\""), "{chart}");
    assert!(
        chart.contains(&format!("data-run=\"{run_id}\"")) && chart.contains("run-ok"),
        "the run marked on the chart: {chart}"
    );
    let history = element(&page, "table", "id=\"runs\"").expect("the run history");
    assert!(history.contains(">success<"), "{history}");
    let compact = element(&page, "button", "data-action=\"Compact now\"").expect("the button");
    assert!(compact.contains("disabled"), "{compact}");
    // The next run's plan (`GET /v1/tables/{table}/plan`): not due, so what a manual run would
    // do, on the table's engine, with why there is no plan when Spark would run it.
    let plan = element(&page, "div", "id=\"plan\"").expect("the next run's plan");
    assert!(
        plan.contains("binpack run (manual)")
            && plan.contains("not due")
            && plan.contains(">spark<"),
        "{plan}"
    );
    assert!(
        plan.contains("Not planned: Spark plans the run only as it runs it")
            || plan.contains("files,"),
        "a plan or why there is none: {plan}"
    );
    let failed_page = rendered(&format!("{base}/#/table/{}", refunds.name));
    let history = element(&failed_page, "table", "id=\"runs\"").expect("the run history");
    assert!(history.contains(&format!(">{class}<")), "{history}");
    assert!(
        element(&failed_page, "div", "id=\"chart\"").is_some_and(|chart| chart.contains("run-bad")),
        "{failed_page}"
    );

    let tenants = rendered(&format!("{base}/#/tenants"));
    let tenant = element(&tenants, "table", "id=\"tenants\"").expect("the tenants");
    assert!(tenant.contains(">default<"), "{tenant}");

    for (what, dom) in [
        ("the overview", &overview),
        ("a table", &page),
        ("the tenants", &tenants),
    ] {
        assert!(!dom.contains("PAGETOKEN"), "the token in {what}");
    }
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("icepack-page");
    std::fs::create_dir_all(&shots).unwrap();
    screenshot(
        &format!("{base}/#/"),
        &shots.join("overview.png"),
        1400,
        560,
    );
    screenshot(
        &format!("{base}/#/table/{}", orders.name),
        &shots.join("table.png"),
        1400,
        900,
    );
    eprintln!("screenshots of the page: {}", shots.display());
    assert!(
        icepack.terminate(run).await.success(),
        "{}",
        icepack.log(run)
    );
}
