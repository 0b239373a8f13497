//! `icepack run`: the service, until SIGTERM or SIGINT.

use super::*;

pub(crate) fn run(path: &Path) -> Result<()> {
    let config = Arc::new(load_config(path)?);
    if config.tables.is_empty() {
        warn!("no [[tables]] configured: every record will be ignored as unrouted");
    }
    let store = open_store(&config)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let system = actix::System::new();
    system.block_on(async move {
        // Bound before anything starts: a taken port fails the start cleanly, with no actor to
        // tear down and no run recovered meanwhile.
        let listener = if config.service.http_listen.is_empty() {
            None
        } else {
            let address: std::net::SocketAddr = config.service.http_listen.parse()?;
            Some(
                http::bind(address)
                    .await
                    .with_context(|| format!("cannot listen on service.http_listen {address}"))?,
            )
        };
        let metrics = Arc::new(Metrics::default());
        metrics.set_series(icepack::ops::metrics::TableSeries::from_config(&config));
        let compaction = compaction(&config, true)?;
        icepack::engine::spawn_probe(
            compaction.engine.clone(),
            metrics.engine.clone(),
            clock.clone(),
            icepack::engine::PROBE_INTERVAL,
        );
        let (pipeline, notifier) =
            notifying_pipeline(&config, store, clock.clone(), metrics.clone(), compaction)?;
        let (control_handle, control_requests) = control_channel();
        if let Some(listener) = listener {
            let address = listener.local_addr()?;
            let state = ApiState {
                pipeline: pipeline.clone(),
                metrics: metrics.clone(),
                clock: clock.clone(),
                token: std::env::var("ICEPACK_API_TOKEN").ok().filter(|token| !token.is_empty()),
                loopback: address.ip().is_loopback(),
                queue_window: Some(Duration::from_secs(
                    (3 * (config.sqs.wait_time_seconds.get() + 15)).max(60),
                )),
                control: Some(control_handle),
            };
            http::serve(listener, state)
                .with_context(|| format!("cannot serve on service.http_listen {address}"))?;
        }
        let control = Control::start(
            path.to_path_buf(),
            config.clone(),
            pipeline.clone(),
            Some(notifier.clone()),
            sqs_connector(),
            metrics.clone(),
            clock.clone(),
        )
        .await;
        // From here on only the table map holds the tables: what the engines, the pool and the
        // control loop keep of the configuration has no list of them (`Config::without_tables`).
        let kept = config.without_tables();
        drop(config);
        let config = kept;
        icepack::service::release_freed_memory();
        info!(
            tables = pipeline.map().num_active(),
            tenants = pipeline.map().tenants().count(),
            queues = control.num_queues(),
            pollers = control.num_pollers(),
            state_dir = %config.service.state_dir.display(),
            "icepack is running (SIGHUP reloads the configuration)"
        );
        let stop_control = control.serve(control_requests);
        wait_for_signal().await;
        info!("shutting down: polling stops, the batch in flight is committed; runs in flight are recovered at the next start");
        if !icepack::ops::control::stop(stop_control, Duration::from_secs(120)).await {
            error!(
                "the batch in flight did not finish within 120 s; its messages stay in the queue"
            );
        }
        let grace = config.service.shutdown_timeout_seconds.seconds();
        pipeline.pool.do_send(StopDispatching);
        match tokio::time::timeout(grace, pipeline.pool.send(WaitIdle)).await {
            Ok(_) => info!("no run in flight"),
            Err(_) => warn!(
                grace_secs = grace.as_secs(),
                "runs still in flight are left running; the next start recovers them"
            ),
        }
        if !notifier.send(Flush(grace)).await.unwrap_or(false) {
            warn!("some notifications were not sent before the shutdown deadline");
        }
        info!("stopped");
        Ok::<(), anyhow::Error>(())
    })?;
    Ok(())
}
