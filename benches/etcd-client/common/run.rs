//! The benchmark, the same for both candidates: `crate::cand` is the
//! candidate's library (spike_grpc or spike_http), with the same functions.
//! Runtimes as the project's store drivers: multi-thread, one worker
//! (src/store/runtime.rs of the repository); the caller's thread awaits a JoinHandle.

use std::time::{Duration, Instant};

use crate::bench::{summary, Args};
use crate::cand::{self, Watch};

pub fn main() {
    let args = Args::parse();
    let rt = spike_base::runtime();
    let rt2 = spike_base::runtime();
    let tag = format!("{}-{}", std::process::id(), cand::NAME);
    if args.fence {
        let ep = args.endpoint.clone();
        rt.block_on(rt.spawn(fence(ep, tag, rt2.handle().clone()))).unwrap();
        return;
    }

    if args.tasks > 0 {
        let (ep, secs, tasks) = (args.endpoint.clone(), args.secs, args.tasks);
        let tag2 = tag.clone();
        let (samples, wall) = rt.block_on(rt.spawn(parallel(ep, secs, tasks, tag2))).unwrap();
        println!("{} {}", cand::NAME, summary(&format!("{tasks} tasks on {tasks} keys @{} ({})", args.endpoint, cand::SHARING), samples, wall));
        return;
    }

    // (a) create-if-absent with a lease, else read; then delete; sequential.
    let (ep, secs, key) = (args.endpoint.clone(), args.secs, format!("spike/pairs/{tag}").into_bytes());
    let (samples, wall) = rt
        .block_on(rt.spawn(async move {
            let mut c = cand::connect(&ep, false).await.unwrap();
            let lease = cand::grant(&mut c, 60).await.unwrap();
            for _ in 0..50 {
                cand::claim(&mut c, &key, b"owner", lease).await.unwrap();
                cand::delete(&mut c, &key).await.unwrap();
            }
            let mut samples = Vec::new();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(secs) {
                let t = Instant::now();
                let claim = cand::claim(&mut c, &key, b"owner", lease).await.unwrap();
                assert!(claim.created && claim.create_revision == claim.header_revision);
                assert_eq!(cand::delete(&mut c, &key).await.unwrap(), 1);
                samples.push(t.elapsed());
            }
            (samples, start.elapsed())
        }))
        .unwrap();
    println!("{} {}", cand::NAME, summary(&format!("pairs (txn+delete) @{}", args.endpoint), samples, wall));

    // (b) watch wake-up: delete in one client, DELETE event in another
    // client on another runtime thread (as another process would be).
    let (ep, events, key) = (args.endpoint.clone(), args.events, format!("spike/watch/{tag}").into_bytes());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(bool, Instant)>();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let (wep, wkey) = (ep.clone(), key.clone());
    rt2.spawn(async move {
        let mut c = cand::connect(&wep, false).await.unwrap();
        let mut w = Watch::start(&mut c, &wkey).await.unwrap();
        ready_tx.send(()).unwrap();
        loop {
            let evs = w.next_events().await.unwrap();
            let now = Instant::now();
            if evs.is_empty() {
                return;
            }
            for is_delete in evs {
                if tx.send((is_delete, now)).is_err() {
                    return;
                }
            }
        }
    });
    let start = Instant::now();
    let samples = rt
        .block_on(rt.spawn(async move {
            ready_rx.await.unwrap();
            let mut c = cand::connect(&ep, false).await.unwrap();
            let lease = cand::grant(&mut c, 60).await.unwrap();
            let mut samples = Vec::new();
            for i in 0..events + 20 {
                assert!(cand::claim(&mut c, &key, b"owner", lease).await.unwrap().created);
                while rx.recv().await.unwrap().0 {}
                let t0 = Instant::now();
                cand::delete(&mut c, &key).await.unwrap();
                let t1 = loop {
                    let (is_delete, at) = rx.recv().await.unwrap();
                    if is_delete {
                        break at;
                    }
                };
                if i >= 20 {
                    samples.push(t1 - t0);
                }
            }
            samples
        }))
        .unwrap();
    println!("{} {}", cand::NAME, summary(&format!("watch wake-up (delete -> event) @{}", args.endpoint), samples, start.elapsed()));
    rt2.shutdown_background();
}

/// `tasks` tasks, each on a key of its own, each doing (a) for `secs`;
/// clients from `cand::for_task` (grpc: clones sharing one HTTP/2 channel;
/// http: one HTTP/1.1 connection per task).
async fn parallel(ep: String, secs: u64, tasks: usize, tag: String) -> (Vec<Duration>, Duration) {
    let mut first = cand::connect(&ep, false).await.unwrap();
    let lease = cand::grant(&mut first, 60).await.unwrap();
    let mut handles = Vec::new();
    let start = Instant::now() + Duration::from_millis(500);
    for t in 0..tasks {
        let mut c = cand::for_task(&mut first).await.unwrap();
        let key = format!("spike/par/{tag}/{t}").into_bytes();
        handles.push(tokio::spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            let mut samples = Vec::new();
            while start.elapsed() < Duration::from_secs(secs) {
                let at = Instant::now();
                assert!(cand::claim(&mut c, &key, b"owner", lease).await.unwrap().created);
                assert_eq!(cand::delete(&mut c, &key).await.unwrap(), 1);
                samples.push(at.elapsed());
            }
            samples
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    (all, start.elapsed())
}

/// Is the key's create_revision a fence that strictly increases across the
/// grants of one key: after a release (delete), after a lease expiry, with
/// other keys written in between, and what a loser reads?
async fn fence(ep: String, tag: String, other: tokio::runtime::Handle) {
    let key = format!("spike/fence/{tag}").into_bytes();
    let mut c = cand::connect(&ep, false).await.unwrap();
    let mut loser = cand::connect(&ep, false).await.unwrap();
    let (wep, wkey) = (ep.clone(), key.clone());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(bool, Instant)>();
    other.spawn(async move {
        let mut wc = cand::connect(&wep, false).await.unwrap();
        let mut w = Watch::start(&mut wc, &wkey).await.unwrap();
        loop {
            let evs = w.next_events().await.unwrap();
            let now = Instant::now();
            for d in evs {
                let _ = tx.send((d, now));
            }
        }
    });
    let mut fences: Vec<i64> = Vec::new();
    let check = |what: &str, claim: &cand::Claim, fences: &mut Vec<i64>| {
        assert!(claim.created, "{what}: not created");
        assert_eq!(claim.create_revision, claim.header_revision, "{what}: header revision != create_revision");
        if let Some(last) = fences.last() {
            assert!(claim.create_revision > *last, "{what}: fence {} not above {last}", claim.create_revision);
        }
        println!("{} fence: {what}: created, fence (create_revision = txn header revision) {}", cand::NAME, claim.create_revision);
        fences.push(claim.create_revision);
    };
    for round in 0..3 {
        // A grant on a short lease that nobody keeps alive.
        let lease = cand::grant(&mut c, 2).await.unwrap();
        let claim = cand::claim(&mut c, &key, b"holder", lease).await.unwrap();
        check(&format!("round {round} grant (lease ttl 2 s)"), &claim, &mut fences);
        // A loser's txn reads the holder's create_revision; its header revision is the store's.
        let other_lease = cand::grant(&mut loser, 30).await.unwrap();
        let lost = cand::claim(&mut loser, &key, b"loser", other_lease).await.unwrap();
        assert!(!lost.created && lost.create_revision == claim.create_revision);
        println!(
            "{} fence:   loser reads create_revision {} (its txn header revision {})",
            cand::NAME, lost.create_revision, lost.header_revision
        );
        // Writes to other keys move the global revision on.
        for i in 0..5 {
            let other_key = format!("spike/fence-other/{tag}/{i}").into_bytes();
            cand::claim(&mut loser, &other_key, b"x", other_lease).await.unwrap();
        }
        // The lease expires: etcd deletes the key.
        let t = Instant::now();
        loop {
            let (is_delete, _) = rx.recv().await.unwrap();
            if is_delete {
                break;
            }
        }
        assert_eq!(cand::read_create_revision(&mut c, &key).await.unwrap(), None);
        println!("{} fence:   lease expired, key deleted by etcd after {:.2} s", cand::NAME, t.elapsed().as_secs_f64());
        // Re-created after the expiry, then released by a delete and granted again.
        let lease = cand::grant(&mut c, 30).await.unwrap();
        let claim = cand::claim(&mut c, &key, b"holder", lease).await.unwrap();
        check(&format!("round {round} re-create after expiry"), &claim, &mut fences);
        cand::delete(&mut c, &key).await.unwrap();
        let claim = cand::claim(&mut c, &key, b"holder", lease).await.unwrap();
        check(&format!("round {round} grant after release"), &claim, &mut fences);
        cand::delete(&mut c, &key).await.unwrap();
        // Consume this round's two DELETE events (release, and this delete).
        let mut deletes = 0;
        while deletes < 2 {
            if rx.recv().await.unwrap().0 {
                deletes += 1;
            }
        }
    }
    println!("{} fence: {} grants, strictly increasing: {:?}", cand::NAME, fences.len(), fences);
}
