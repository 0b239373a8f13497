//! The JVM-free engine: compacts an Iceberg table's small data files inside icepack's process.

pub mod plan;
