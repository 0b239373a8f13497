//! The threads the table accumulators run on.

use std::sync::Arc;

use actix::{Actor, Addr, Arbiter, ArbiterHandle};

use crate::intake::routing::TableIndex;
use crate::table::actor::TableAccumulatorActor;
use crate::table::board::StatusBoard;

/// The threads the accumulators run on: one actix arbiter each.
pub struct Workers {
    arbiters: Vec<Arbiter>,
    thread_ids: Vec<std::thread::ThreadId>,
    /// Where the accumulators started here publish their tables' summaries.
    board: Option<Arc<StatusBoard>>,
}

impl Workers {
    /// `num_threads` workers (0: one per core, at least one); must run inside an actix system.
    pub fn start(num_threads: usize) -> Workers {
        let num_threads = match num_threads {
            0 => std::thread::available_parallelism().map_or(1, |cores| cores.get()),
            n => n,
        };
        let arbiters: Vec<Arbiter> = (0..num_threads).map(|_| Arbiter::new()).collect();
        let thread_ids = arbiters
            .iter()
            .map(|arbiter| {
                let (sender, id) = std::sync::mpsc::channel();
                arbiter.spawn_fn(move || {
                    let _ = sender.send(std::thread::current().id());
                });
                id.recv().expect("a worker thread starts")
            })
            .collect();
        Workers {
            arbiters,
            thread_ids,
            board: None,
        }
    }

    /// The accumulators started here (restarted ones too) publish to `board`.
    pub fn publishing_to(mut self, board: Arc<StatusBoard>) -> Workers {
        self.board = Some(board);
        self
    }

    pub fn len(&self) -> usize {
        self.arbiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.arbiters.is_empty()
    }

    /// Where the table's accumulator runs, also after a restart.
    pub fn for_table(&self, table: TableIndex) -> ArbiterHandle {
        self.arbiters[table % self.arbiters.len()].handle()
    }

    /// Starts the table's accumulator on its worker (from any thread).
    pub fn start_accumulator(
        &self,
        table: TableIndex,
        actor: TableAccumulatorActor,
    ) -> Addr<TableAccumulatorActor> {
        let actor = match &self.board {
            Some(board) => actor.publishing_to(board.clone()),
            None => actor,
        };
        TableAccumulatorActor::start_in_arbiter(&self.for_table(table), move |_ctx| actor)
    }
}

impl Drop for Workers {
    /// The worker threads end with the pipeline, and are waited for: their accumulators hold the
    /// state store, which must be closed before the process exits (RocksDB's own threads and
    /// static objects would be torn down under an open database otherwise).
    fn drop(&mut self) {
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
        if self.thread_ids.contains(&std::thread::current().id()) {
            // Dropped on a worker itself: it cannot wait for its own end.
            return;
        }
        for arbiter in self.arbiters.drain(..) {
            let _ = arbiter.join();
        }
    }
}
