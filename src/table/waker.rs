//! The waker: one timer for the scheduled work of every idle table (a periodic reconcile, a read
//! of unconfirmed files, `remove_orphan_files`), instead of one per table. When a table's time
//! comes its accumulator is sent a [`Tick`] through its handle, which starts it from the stored
//! state; it does the work and, idle again, stops and tells the waker its next time.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use actix::{Actor, AsyncContext, Context, Handler, Message};

use crate::base::clock::{Clock, UnixMillis};
use crate::intake::routing::TableIndex;
use crate::messages::Tick;
use crate::table::handle::TableHandles;

/// How often the waker looks for tables whose time has come.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// An idle table's next scheduled work is at `at`: wake it then (replaces an earlier wish).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WakeAt {
    pub table: TableIndex,
    pub at: UnixMillis,
}

/// How many tables wait for their time (tests and the benchmarks).
#[derive(Message)]
#[rtype(result = "usize")]
pub struct Waiting;

pub struct Waker {
    /// The pipeline's current map: a table's handle is the same in every snapshot.
    map: Arc<RwLock<Arc<TableHandles>>>,
    clock: Arc<dyn Clock>,
    /// By time, then table: the next table to wake is the first.
    queue: BTreeSet<(UnixMillis, TableIndex)>,
    /// Each waiting table's time.
    tables: HashMap<TableIndex, UnixMillis>,
}

impl Waker {
    pub fn new(map: Arc<RwLock<Arc<TableHandles>>>, clock: Arc<dyn Clock>) -> Waker {
        Waker {
            map,
            clock,
            queue: BTreeSet::new(),
            tables: HashMap::new(),
        }
    }

    /// Wakes every table whose time has come.
    fn wake_due(&mut self) {
        let now = self.clock.now_millis();
        if self.queue.first().is_none_or(|&(at, _)| at > now) {
            return;
        }
        let map = self
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        while let Some(&(at, table)) = self.queue.first() {
            if at > now {
                break;
            }
            self.queue.pop_first();
            self.tables.remove(&table);
            if table < map.len() {
                map.accumulator(table).do_send(Tick);
            }
        }
    }
}

impl Actor for Waker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(CHECK_INTERVAL, |waker, _ctx| waker.wake_due());
    }
}

impl Handler<WakeAt> for Waker {
    type Result = ();

    fn handle(&mut self, message: WakeAt, _ctx: &mut Context<Self>) {
        if let Some(at) = self.tables.insert(message.table, message.at) {
            self.queue.remove(&(at, message.table));
        }
        self.queue.insert((message.at, message.table));
    }
}

impl Handler<Waiting> for Waker {
    type Result = usize;

    fn handle(&mut self, _message: Waiting, _ctx: &mut Context<Self>) -> usize {
        self.queue.len()
    }
}
