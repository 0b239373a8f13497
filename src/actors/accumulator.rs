//! The table accumulator actor: the single writer of one table's state.

use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, AsyncContext, Context, Handler, SpawnHandle};
use tracing::{info, warn};

use super::messages::{GetStatus, Settle, Stage, Tick};
use crate::accumulator::{Accumulator, Staged};
use crate::clock::Clock;
use crate::policy::DueReason;
use crate::status::table_status;
use crate::store::{StateStore, StoreError};

pub struct TableAccumulatorActor {
    accumulator: Accumulator,
    store: Arc<dyn StateStore>,
    clock: Arc<dyn Clock>,
    timer: Option<SpawnHandle>,
    reported_due: Option<DueReason>,
}

impl TableAccumulatorActor {
    pub fn new(
        accumulator: Accumulator,
        store: Arc<dyn StateStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        TableAccumulatorActor {
            accumulator,
            store,
            clock,
            timer: None,
            reported_due: None,
        }
    }

    /// Checks the thresholds, reports a table that became due, and arms the max-wait timer.
    fn evaluate(&mut self, ctx: &mut Context<Self>) {
        let now = self.clock.now_millis();
        let due = self.accumulator.due(now);
        if due != self.reported_due {
            let pending = &self.accumulator.snapshot().state.pending;
            match due {
                Some(reason) => info!(
                    table = %self.accumulator.spec().table,
                    reason = reason.as_str(),
                    pending_files = pending.files,
                    pending_bytes = pending.bytes,
                    "table is due for compaction"
                ),
                None => info!(table = %self.accumulator.spec().table, "table is no longer due"),
            }
            self.reported_due = due;
        }
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        if due.is_none() {
            if let Some(deadline) = self.accumulator.next_deadline() {
                let delay = Duration::from_millis(deadline.saturating_sub(now).max(0) as u64);
                self.timer = Some(ctx.notify_later(Tick, delay));
            }
        }
    }
}

impl Actor for TableAccumulatorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.evaluate(ctx);
    }
}

impl Handler<Stage> for TableAccumulatorActor {
    type Result = Result<Staged, StoreError>;

    fn handle(&mut self, message: Stage, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.clock.now_millis();
        self.accumulator
            .stage(message.candidates, self.store.as_ref(), now)
            .inspect_err(|error| {
                warn!(table = %self.accumulator.spec().table, %error, "cannot stage records")
            })
    }
}

impl Handler<Settle> for TableAccumulatorActor {
    type Result = ();

    fn handle(&mut self, message: Settle, ctx: &mut Context<Self>) {
        self.accumulator.settle(message.committed);
        self.evaluate(ctx);
    }
}

impl Handler<Tick> for TableAccumulatorActor {
    type Result = ();

    fn handle(&mut self, _message: Tick, ctx: &mut Context<Self>) {
        self.timer = None;
        self.evaluate(ctx);
    }
}

impl Handler<GetStatus> for TableAccumulatorActor {
    type Result = actix::MessageResult<GetStatus>;

    fn handle(&mut self, _message: GetStatus, _ctx: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(table_status(
            self.accumulator.spec(),
            self.accumulator.snapshot(),
            self.clock.now_millis(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulator::Candidate;
    use crate::clock::FakeClock;
    use crate::config::TableSpec;
    use crate::policy::Thresholds;
    use crate::store::MemoryStore;

    fn spec() -> Arc<TableSpec> {
        Arc::new(TableSpec {
            table: "n.t".to_string(),
            bucket: "b".to_string(),
            prefix: "t/".to_string(),
            thresholds: Thresholds {
                small_file_bytes: 100,
                min_files: 10,
                min_total_bytes: 1_000,
                max_wait_millis: Some(60_000),
            },
            target_file_bytes: 1_000,
            file_suffixes: vec![".parquet".to_string()],
        })
    }

    #[actix::test]
    async fn max_wait_is_enforced_by_the_timer_without_new_events() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let clock = FakeClock::new(1_000_000);
        let accumulator = Accumulator::load(spec(), store.as_ref()).unwrap();
        let actor =
            TableAccumulatorActor::new(accumulator, store.clone(), Arc::new(clock.clone())).start();
        let mut staged = actor
            .send(Stage {
                candidates: vec![Candidate {
                    bucket: "b".to_string(),
                    key: "t/a.parquet".to_string(),
                    size: 5,
                    event_millis: 1_000_000,
                    partition: String::new(),
                }],
            })
            .await
            .unwrap()
            .unwrap();
        store.commit(std::mem::take(&mut staged.ops)).unwrap();
        actor.send(Settle { committed: true }).await.unwrap();
        assert!(!actor.send(GetStatus).await.unwrap().due);

        clock.advance(Duration::from_secs(60));
        actor.send(Tick).await.unwrap();
        let status = actor.send(GetStatus).await.unwrap();
        assert!(status.due);
        assert_eq!(status.due_reason, Some("max_wait"));
        assert_eq!(status.pending_files, 1);
    }

    #[actix::test]
    async fn the_timer_fires_on_its_own_at_the_deadline() {
        use crate::clock::SystemClock;
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let now = SystemClock.now_millis();
        let accumulator = Accumulator::load(spec(), store.as_ref()).unwrap();
        let actor =
            TableAccumulatorActor::new(accumulator, store.clone(), Arc::new(SystemClock)).start();
        // The file's event is 300 ms short of the 60 s max-wait.
        let mut staged = actor
            .send(Stage {
                candidates: vec![Candidate {
                    bucket: "b".to_string(),
                    key: "t/a.parquet".to_string(),
                    size: 5,
                    event_millis: now - 60_000 + 300,
                    partition: String::new(),
                }],
            })
            .await
            .unwrap()
            .unwrap();
        store.commit(std::mem::take(&mut staged.ops)).unwrap();
        actor.send(Settle { committed: true }).await.unwrap();
        assert!(!actor.send(GetStatus).await.unwrap().due);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !actor.send(GetStatus).await.unwrap().due {
            assert!(std::time::Instant::now() < deadline, "the max-wait timer never fired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
