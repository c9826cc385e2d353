//! The run store contract, one suite run against every backend: this
//! process's memory, the embedded file store and Redis (a real
//! `redis-server`, started here on a free port; `cargo xtask ci` installs
//! Debian's package).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_store::testing::RedisServer as Redis;
use codemode_store::{
    ANY_OWNER, Bounds, FileBackend, MemoryBackend, RedisBackend, RunBackend, StoreError,
};

const BOUNDS: Bounds = Bounds {
    max_runs: 100,
    max_bytes: 1 << 20,
};
const TTL: Duration = Duration::from_secs(60);

/// Opens backends on one store: a second `open` is another process's view.
trait Place {
    fn open(&self) -> Arc<dyn RunBackend>;
}

/// The store's path, and the directory that holds it while the test runs.
struct FilePlace(PathBuf, #[allow(dead_code)] tempfile::TempDir);
impl Place for FilePlace {
    fn open(&self) -> Arc<dyn RunBackend> {
        Arc::new(FileBackend::open(&self.0).expect("opens"))
    }
}

impl Place for Redis {
    fn open(&self) -> Arc<dyn RunBackend> {
        Arc::new(RedisBackend::open(&self.url()).expect("connects"))
    }
}

/// Each `open` is another process's view of the same memory; dropping it
/// is that process dying.
struct MemoryPlace(MemoryBackend);
impl Place for MemoryPlace {
    fn open(&self) -> Arc<dyn RunBackend> {
        Arc::new(self.0.another_process())
    }
}

fn file_place() -> FilePlace {
    let dir = tempfile::tempdir().expect("a temp dir");
    FilePlace(dir.path().join("sub/runs.db"), dir)
}

fn each_backend(test: impl Fn(&dyn Place)) {
    test(&MemoryPlace(MemoryBackend::new()));
    test(&file_place());
    test(&Redis::start());
}

#[test]
fn a_run_is_claimed_once_and_stored_again_with_a_new_generation() {
    each_backend(|place| {
        let store = place.open();
        assert_eq!(store.put("run_a", "p:alice", b"one", TTL, BOUNDS), Ok(1));
        let claimed = store.claim("run_a", "p:alice", None).expect("claims");
        assert_eq!(
            (claimed.record.as_slice(), claimed.generation),
            (&b"one"[..], 1)
        );
        assert!(
            matches!(
                store.claim("run_a", "p:alice", None),
                Err(StoreError::Busy { .. })
            ),
            "a second claim while resuming is refused"
        );
        assert_eq!(store.put("run_a", "p:alice", b"two", TTL, BOUNDS), Ok(2));
        let again = store
            .claim("run_a", "p:alice", None)
            .expect("waiting again");
        assert_eq!(
            (again.record.as_slice(), again.generation),
            (&b"two"[..], 2)
        );
        store.remove("run_a").expect("removes");
        assert_eq!(
            store.claim("run_a", "p:alice", None).map(|c| c.generation),
            Err(StoreError::Unknown)
        );
        assert_eq!(store.stats().expect("stats").waiting, 0);
    });
}

#[test]
fn a_claim_naming_the_current_generation_gets_no_record_back() {
    each_backend(|place| {
        let store = place.open();
        store
            .put("run_g", "o", b"big record", TTL, BOUNDS)
            .expect("put");
        let claimed = store.claim("run_g", "o", Some(1)).expect("claims");
        assert_eq!((claimed.generation, claimed.record.len()), (1, 0));
        store.put("run_g", "o", b"again", TTL, BOUNDS).expect("put");
        // A stale generation gets the record.
        let claimed = store.claim("run_g", "o", Some(1)).expect("claims");
        assert_eq!(
            (claimed.generation, claimed.record.as_slice()),
            (2, &b"again"[..])
        );
    });
}

#[test]
fn only_the_owner_claims_a_run_unless_the_id_is_the_capability() {
    each_backend(|place| {
        let store = place.open();
        store
            .put("run_b", "p:alice", b"x", TTL, BOUNDS)
            .expect("put");
        assert_eq!(
            store
                .claim("run_b", "p:mallory", None)
                .map(|c| c.generation),
            Err(StoreError::OtherOwner)
        );
        // The refused claim changed nothing.
        assert!(store.claim("run_b", "p:alice", None).is_ok());
        store
            .put("run_c", ANY_OWNER, b"y", TTL, BOUNDS)
            .expect("put");
        assert!(store.claim("run_c", "anyone", None).is_ok());
    });
}

#[test]
fn bounds_hold_over_the_whole_store() {
    each_backend(|place| {
        let store = place.open();
        let two = Bounds {
            max_runs: 2,
            max_bytes: 1 << 20,
        };
        store.put("r1", "o", b"1", TTL, two).expect("first");
        store.put("r2", "o", b"2", TTL, two).expect("second");
        assert_eq!(
            store.put("r3", "o", b"3", TTL, two),
            Err(StoreError::Full { limit: 2 })
        );
        // Storing a held run again is not a new run.
        store.put("r2", "o", b"22", TTL, two).expect("again");
        let small = Bounds {
            max_runs: 100,
            max_bytes: 4096,
        };
        let big = vec![7u8; 8192];
        assert!(matches!(
            store.put("r4", "o", &big, TTL, small),
            Err(StoreError::BytesFull { limit: 4096, .. })
        ));
        let stats = store.stats().expect("stats");
        assert_eq!(stats.waiting, 2);
        assert!(stats.bytes >= 3, "bytes are counted: {stats:?}");
    });
}

#[test]
fn a_run_past_its_ttl_is_expired_not_unknown() {
    each_backend(|place| {
        let store = place.open();
        store
            .put("run_t", "o", b"x", Duration::from_millis(150), BOUNDS)
            .expect("put");
        store.put("run_u", "o", b"y", TTL, BOUNDS).expect("put");
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(
            store.claim("run_t", "o", None).map(|c| c.generation),
            Err(StoreError::Expired)
        );
        store.expire().expect("expires");
        let stats = store.stats().expect("stats");
        assert_eq!((stats.waiting, stats.resuming), (1, 0), "{stats:?}");
        assert_eq!(
            store.claim("run_t", "o", None).map(|c| c.generation),
            Err(StoreError::Expired)
        );
    });
}

#[test]
fn results_reach_the_claim_and_wake_waiters() {
    each_backend(|place| {
        let store = place.open();
        store.put("run_r", "o", b"x", TTL, BOUNDS).expect("put");
        store.put_result("run_r", 3, b"{\"ok\":1}").expect("result");
        // A late result of a run the store no longer has is dropped.
        store.put_result("run_gone", 1, b"late").expect("ignored");
        let waiter = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let started = Instant::now();
                let got = store.await_result("run_r", 9, Duration::from_secs(20));
                (got, started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        store.put_result("run_r", 9, b"{\"ok\":9}").expect("result");
        let (got, took) = waiter.join().expect("joins");
        assert_eq!(got, Ok(Some(b"{\"ok\":9}".to_vec())));
        assert!(
            took < Duration::from_secs(5),
            "woken, not timed out: {took:?}"
        );
        let claimed = store.claim("run_r", "o", None).expect("claims");
        let mut results = claimed.results;
        results.sort();
        assert_eq!(
            results,
            vec![(3, b"{\"ok\":1}".to_vec()), (9, b"{\"ok\":9}".to_vec())]
        );
        assert_eq!(
            store.await_result("run_r", 10, Duration::from_millis(50)),
            Ok(None)
        );
    });
}

#[test]
fn a_claim_by_a_process_that_died_is_interrupted_not_replayed() {
    each_backend(|place| {
        let first = place.open();
        first.put("run_k", "o", b"snap", TTL, BOUNDS).expect("put");
        first.put("run_w", "o", b"waits", TTL, BOUNDS).expect("put");
        first.claim("run_k", "o", None).expect("claims");
        let dead = first.instance().to_owned();
        drop(first);
        let second = place.open();
        // The heartbeat of the dropped Redis client ends within a second.
        let started = Instant::now();
        while second.instance_alive(&dead) {
            assert!(started.elapsed() < Duration::from_secs(10), "still alive");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(
            second.claim("run_k", "o", None).map(|c| c.generation),
            Err(StoreError::Interrupted { instance: dead })
        );
        // A run that was waiting survives the process, record and all.
        let waiting = second
            .claim("run_w", "o", None)
            .expect("claims after restart");
        assert_eq!(waiting.record, b"waits");
    });
}

#[test]
fn two_redis_clients_share_runs_and_results() {
    let redis = Redis::start();
    let a = redis.open();
    let b = redis.open();
    assert_ne!(a.instance(), b.instance());
    assert!(a.instance_alive(b.instance()) && b.instance_alive(a.instance()));
    a.put("run_s", "o", b"from a", TTL, BOUNDS)
        .expect("put on a");
    let claimed = b.claim("run_s", "o", None).expect("claimed on b");
    assert_eq!(claimed.record, b"from a");
    assert!(matches!(
        a.claim("run_s", "o", None),
        Err(StoreError::Busy { instance }) if instance == b.instance()
    ));
    let waiter = {
        let b = Arc::clone(&b);
        std::thread::spawn(move || b.await_result("run_s", 1, Duration::from_secs(20)))
    };
    std::thread::sleep(Duration::from_millis(100));
    a.put_result("run_s", 1, b"done on a").expect("result on a");
    assert_eq!(
        waiter.join().expect("joins"),
        Ok(Some(b"done on a".to_vec()))
    );
}

#[test]
fn an_unreachable_redis_is_a_clear_error_and_a_restarted_one_is_used_again() {
    let mut redis = Redis::start();
    let store = redis.open();
    store.put("run_p", "o", b"kept", TTL, BOUNDS).expect("put");
    let url = redis.url();
    redis.kill();
    match store.put("run_q", "o", b"x", TTL, BOUNDS) {
        Err(StoreError::Unavailable { store, .. }) => assert_eq!(store, url),
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert!(matches!(
        RedisBackend::open(&url).map(|_| ()),
        Err(StoreError::Unavailable { .. })
    ));
    // Back on the same append-only file: the waiting run is still there
    // and the same client reconnects on its own.
    redis.restart();
    assert_eq!(
        store.claim("run_p", "o", None).expect("claims").record,
        b"kept"
    );
}

/// A connection of its own to the test's redis-server, to do to the data
/// what an operator (or an accident) might.
fn raw(redis: &Redis) -> redis::Connection {
    redis::Client::open(redis.url())
        .expect("a client")
        .get_connection()
        .expect("connects")
}

#[test]
fn a_redis_that_lost_its_data_says_so_instead_of_never_existed() {
    let redis = Redis::start();
    let store = redis.open();
    store.put("run_l", "o", b"gone", TTL, BOUNDS).expect("put");
    assert!(matches!(
        store.claim("run_x", "o", None),
        Err(StoreError::Unknown)
    ));
    redis::cmd("FLUSHALL")
        .exec(&mut raw(&redis))
        .expect("flushes");
    match store.claim("run_l", "o", None) {
        Err(StoreError::Lost { store: shown }) => assert_eq!(shown, redis.url()),
        other => panic!("expected lost, got {other:?}"),
    }
    // A process that opens the emptied store starts a new epoch: an
    // unknown id there is just unknown; the old process still knows more.
    let fresh = redis.open();
    assert!(matches!(
        fresh.claim("run_l", "o", None),
        Err(StoreError::Unknown)
    ));
    assert!(matches!(
        store.claim("run_l", "o", None),
        Err(StoreError::Lost { .. })
    ));
}

#[test]
fn a_garbage_redis_record_is_unreadable_not_another_owners() {
    let redis = Redis::start();
    let store = redis.open();
    let mut con = raw(&redis);
    redis::cmd("HSET")
        .arg("codemode:run:run_g")
        .arg("state")
        .arg("waiting")
        .exec(&mut con)
        .expect("writes");
    redis::cmd("SET")
        .arg("codemode:run:run_s")
        .arg("junk")
        .exec(&mut con)
        .expect("writes");
    for id in ["run_g", "run_s"] {
        match store.claim(id, "o", None) {
            Err(StoreError::Unreadable {
                store: shown,
                reason,
            }) => {
                assert_eq!(shown, redis.url());
                assert!(!reason.is_empty());
            }
            other => panic!("{id}: expected unreadable, got {other:?}"),
        }
    }
}

#[test]
fn a_file_store_is_shared_by_every_process_that_opens_it_and_survives_reopening() {
    let place = file_place();
    let a = place.open();
    let b = place.open();
    assert_ne!(a.instance(), b.instance());
    assert!(a.instance_alive(b.instance()) && b.instance_alive(a.instance()));
    a.put("run_f", ANY_OWNER, b"durable", TTL, BOUNDS)
        .expect("put");
    // The bounds count every process's runs.
    let one = Bounds {
        max_runs: 1,
        max_bytes: 1 << 20,
    };
    assert_eq!(
        b.put("run_g", "o", b"more", TTL, one),
        Err(StoreError::Full { limit: 1 })
    );
    let claimed = b.claim("run_f", "x", None).expect("claims on b");
    assert_eq!(claimed.record, b"durable");
    assert!(matches!(
        a.claim("run_f", "x", None),
        Err(StoreError::Busy { instance }) if instance == b.instance()
    ));
    // A result written by one process reaches a wait in the other.
    let waiter = {
        let b = Arc::clone(&b);
        std::thread::spawn(move || b.await_result("run_f", 3, Duration::from_secs(10)))
    };
    std::thread::sleep(Duration::from_millis(50));
    a.put_result("run_f", 3, b"ok").expect("result");
    assert_eq!(waiter.join().unwrap(), Ok(Some(b"ok".to_vec())));
    // b dies holding the claim: a sees it gone, and the run interrupted.
    let dead = b.instance().to_owned();
    drop(b);
    assert!(!a.instance_alive(&dead));
    assert!(matches!(
        a.claim("run_f", "x", None),
        Err(StoreError::Interrupted { .. })
    ));
    drop(a);
    let reopened = place.open();
    assert_eq!(reopened.stats().expect("stats").resuming, 1);
}

#[test]
fn a_file_store_process_killed_without_closing_is_dead_to_the_others() {
    let place = file_place();
    let store = place.open();
    // What SIGKILL leaves: a lock file nobody holds (the kernel released
    // the lock with the process).
    let instances = place.0.with_file_name("runs.db.instances");
    std::fs::write(instances.join("4242-00ff"), b"").unwrap();
    assert!(!store.instance_alive("4242-00ff"));
    assert!(
        !instances.join("4242-00ff").exists(),
        "the dead process's file is removed"
    );
    // Names that are not instance ids never reach the file system.
    assert!(!store.instance_alive("../runs.db"));
    assert!(!store.instance_alive(""));
}

#[test]
fn a_deferred_claim_holds_like_a_claim_and_a_confirmed_one_is_a_claim() {
    each_backend(|place| {
        let store = place.open();
        store.put("run_d", "o", b"rec", TTL, BOUNDS).expect("put");
        let claimed = store.claim_deferred("run_d", "o", Some(1)).expect("claims");
        assert_eq!((claimed.generation, claimed.record.len()), (1, 0));
        for second in [
            store.claim("run_d", "o", None),
            store.claim_deferred("run_d", "o", Some(1)),
        ] {
            assert!(
                matches!(second, Err(StoreError::Busy { .. })),
                "one claim at a time: {second:?}"
            );
        }
        store.confirm_claim("run_d").expect("confirms");
        assert!(matches!(
            store.claim("run_d", "o", None),
            Err(StoreError::Busy { .. })
        ));
        assert_eq!(store.put("run_d", "o", b"again", TTL, BOUNDS), Ok(2));
        // A stale generation gets the record; refusals are a claim's.
        let claimed = store.claim_deferred("run_d", "o", Some(1)).expect("claims");
        assert_eq!(
            (claimed.generation, claimed.record.as_slice()),
            (2, &b"again"[..])
        );
        assert_eq!(
            store
                .claim_deferred("run_d", "p", Some(2))
                .map(|c| c.generation),
            Err(StoreError::OtherOwner)
        );
        assert_eq!(
            store
                .claim_deferred("run_none", "o", None)
                .map(|c| c.generation),
            Err(StoreError::Unknown)
        );
    });
}

#[test]
fn the_memory_store_keeps_no_run_beyond_its_process() {
    assert!(!MemoryBackend::new().outlives_process());
    assert!(MemoryBackend::new().exclusive());
    let opened = codemode_store::open("memory").expect("opens");
    assert_eq!(opened.describe(), "memory");
}

/// Approvals outlive a process and reach every replica: a held call is
/// listed by every process on the store, the first decision wins and wakes
/// whoever awaits it elsewhere, a decided call cannot be listed again, and
/// held calls leave with their run.
#[test]
fn held_calls_are_listed_everywhere_and_decided_once() {
    each_backend(|place| {
        let a = place.open();
        let b = place.open();
        a.put("run_h", "o", b"rec", TTL, BOUNDS).expect("put");
        a.put_held("run_h", 4, b"{\"call\":4}").expect("held");
        a.put_held("run_h", 5, b"{\"call\":5}").expect("held");
        // Nothing is listed for a run the store does not have.
        a.put_held("run_none", 1, b"x").expect("ignored");
        let mut listed: Vec<(String, u32, Vec<u8>)> = b
            .list_held()
            .expect("lists")
            .into_iter()
            .map(|h| (h.run_id, h.request_id, h.entry))
            .collect();
        listed.sort();
        assert_eq!(
            listed,
            vec![
                ("run_h".into(), 4, b"{\"call\":4}".to_vec()),
                ("run_h".into(), 5, b"{\"call\":5}".to_vec()),
            ]
        );
        let waiter = {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                let started = Instant::now();
                (
                    a.await_decision("run_h", 4, Duration::from_secs(20)),
                    started.elapsed(),
                )
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(b.decide_held("run_h", 4, b"approve"), Ok(true));
        // The first decision wins, on whichever process it is made.
        assert_eq!(a.decide_held("run_h", 4, b"deny"), Ok(false));
        let (got, took) = waiter.join().expect("joins");
        assert_eq!(got, Ok(Some(b"approve".to_vec())));
        assert!(took < Duration::from_secs(5), "woken: {took:?}");
        // The call starts once, in one process; the other learns which.
        assert_eq!(b.start_held("run_h", 4), Ok(Some(b.instance().to_owned())));
        assert_eq!(a.start_held("run_h", 4), Ok(Some(b.instance().to_owned())));
        assert_eq!(a.start_held("run_none", 4), Ok(None));
        // Listing it again does not make a decided call undecided.
        a.put_held("run_h", 4, b"{\"call\":4}").expect("ignored");
        let left: Vec<u32> = b
            .list_held()
            .expect("lists")
            .iter()
            .map(|h| h.request_id)
            .collect();
        assert_eq!(left, vec![5]);
        assert_eq!(
            a.await_decision("run_h", 5, Duration::from_millis(50)),
            Ok(None)
        );
        // A run's held calls and decisions leave the store with it.
        a.remove("run_h").expect("removed");
        assert_eq!(b.list_held(), Ok(Vec::new()));
        assert_eq!(b.decide_held("run_h", 5, b"approve"), Ok(false));
        assert_eq!(b.start_held("run_h", 4), Ok(None));
        // A run stored again under the same id starts with nothing held.
        a.put("run_h", "o", b"rec", TTL, BOUNDS).expect("put");
        assert_eq!(
            a.start_held("run_h", 4),
            Ok(Some(a.instance().to_owned())),
            "the start marker left with the run"
        );
        assert_eq!(
            b.await_decision("run_h", 4, Duration::ZERO),
            Ok(None),
            "the decision left with the run"
        );
    });
}
