//! Benchmark of candidate A (etcd-client): see ../../common/run.rs.
pub(crate) use spike_grpc as cand;
#[path = "../../common/bench.rs"]
mod bench;
#[path = "../../common/run.rs"]
mod run;
fn main() {
    run::main()
}
