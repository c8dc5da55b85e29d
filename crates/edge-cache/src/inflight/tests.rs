//! Collapse-lock tests: a real leader thread writing a real cache object, followers as
//! tasks on a tokio runtime on another thread, woken only by the watch channel.

use super::*;
use crate::cache::{Cache, Lookup};
use crate::CacheConfig;
use edge_http::HeaderMap;
use std::sync::atomic::AtomicUsize;
use std::time::{Instant, SystemTime};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// The followers' `cache_lock_timeout` where a test does not time out on purpose.
const LOCK: Duration = Duration::from_secs(30);

fn open(dir: &std::path::Path) -> Arc<Cache> {
    Cache::open(CacheConfig {
        name: "t".into(),
        path: dir.to_path_buf(),
        ..Default::default()
    })
    .unwrap()
}

fn body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 253) as u8).collect()
}

/// Follow a fill to the end; returns the body and whether bytes arrived before `Done`.
async fn follow(fill: Arc<Fill>) -> Result<(Vec<u8>, bool), String> {
    let head = match fill.wait_head(LOCK).await {
        WaitHead::Head(h) => h,
        other => return Err(format!("{other:?}")),
    };
    let mut r = fill.reader(head);
    let mut out = Vec::new();
    let mut early = false;
    let mut buf = vec![0u8; 8192];
    loop {
        let n = r.read_chunk(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        if !matches!(fill.state(), FillState::Done { .. }) {
            early = true;
        }
        out.extend_from_slice(&buf[..n]);
    }
    Ok((out, early))
}

#[test]
fn hundred_followers_stream_one_fill_as_it_arrives() {
    let d = tempfile::tempdir().unwrap();
    let cache = open(d.path());
    let key = "http://h/big";
    let hash = crate::key::key_hash(key);
    let expected = body(2 << 20);

    let Join::Leader(mut leader) = cache.inflight().join(hash) else {
        panic!("first joiner leads");
    };
    let followers: Vec<Arc<Fill>> = (0..100)
        .map(|_| match cache.inflight().join(hash) {
            Join::Follower(f) => f,
            Join::Leader(_) => panic!("only one leader"),
        })
        .collect();
    assert_eq!(cache.inflight().collapsed(), 100);

    // Followers run on this thread's runtime; the leader on its own thread, which
    // writes the first 64 KiB and then waits until every follower has read some
    // bytes: if followers only saw data at the end, this would time out.
    let first_seen = Arc::new(AtomicUsize::new(0));
    let leader_thread = {
        let cache = cache.clone();
        let expected = expected.clone();
        let first_seen = first_seen.clone();
        std::thread::spawn(move || {
            let mut m = crate::ObjectMeta::new("", 200, SystemTime::now());
            m.freshness.lifetime = Duration::from_secs(60);
            m.body_len = expected.len() as u64;
            let mut w = cache.begin_write(key, &HeaderMap::new(), m).unwrap();
            leader.publish_head(
                Arc::new(w.meta().clone()),
                w.reader().unwrap(),
                w.body_offset(),
            );
            let mut chunks = expected.chunks(64 * 1024);
            w.write(chunks.next().unwrap()).unwrap();
            leader.progress(w.written());
            let deadline = Instant::now() + Duration::from_secs(20);
            while first_seen.load(Ordering::Acquire) < 100 {
                assert!(
                    Instant::now() < deadline,
                    "followers did not stream before completion"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            for c in chunks {
                w.write(c).unwrap();
                leader.progress(w.written());
            }
            let len = w.written();
            w.finish().unwrap();
            leader.done(len);
        })
    };
    let results = rt().block_on(async {
        let tasks: Vec<_> = followers
            .into_iter()
            .map(|f| {
                let first_seen = first_seen.clone();
                tokio::spawn(async move {
                    let head = match f.wait_head(LOCK).await {
                        WaitHead::Head(h) => h,
                        other => panic!("{other:?}"),
                    };
                    let mut r = f.reader(head);
                    let mut out = Vec::new();
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = r.read_chunk(&mut buf).await.unwrap();
                        if n == 0 {
                            break;
                        }
                        if out.is_empty() {
                            first_seen.fetch_add(1, Ordering::AcqRel);
                        }
                        out.extend_from_slice(&buf[..n]);
                    }
                    out
                })
            })
            .collect();
        let mut v = Vec::new();
        for t in tasks {
            v.push(t.await.unwrap());
        }
        v
    });
    leader_thread.join().unwrap();
    assert_eq!(results.len(), 100);
    for r in &results {
        assert!(r == &expected, "a follower got a different body");
    }
    assert!(cache.inflight().is_empty());
    assert!(matches!(
        cache.lookup(key, &HeaderMap::new(), SystemTime::now()),
        Lookup::Fresh(_)
    ));
    cache.shutdown();
}

#[test]
fn leader_failure_before_head_promotes_one_follower() {
    let d = tempfile::tempdir().unwrap();
    let cache = open(d.path());
    let hash = 42;
    let Join::Leader(leader) = cache.inflight().join(hash) else {
        panic!()
    };
    let followers: Vec<Arc<Fill>> = (0..10)
        .map(|_| match cache.inflight().join(hash) {
            Join::Follower(f) => f,
            Join::Leader(_) => panic!(),
        })
        .collect();
    leader.fail();
    let cache2 = cache.clone();
    let (leaders, followers_after) = rt().block_on(async move {
        let mut leaders = Vec::new();
        let mut follow_again = Vec::new();
        for f in followers {
            match f.wait_head(LOCK).await {
                WaitHead::Retry => match cache2.inflight().join(hash) {
                    Join::Leader(h) => leaders.push(h),
                    Join::Follower(f) => follow_again.push(f),
                },
                other => panic!("{other:?}"),
            }
        }
        (leaders, follow_again)
    });
    assert_eq!(leaders.len(), 1, "exactly one follower takes over");
    assert_eq!(followers_after.len(), 9);
    // The new leader completes; the others stream its body.
    let mut new_leader = leaders.into_iter().next().unwrap();
    let mut m = crate::ObjectMeta::new("", 200, SystemTime::now());
    m.body_len = 3;
    let mut w = cache.begin_write("k", &HeaderMap::new(), m).unwrap();
    new_leader.publish_head(
        Arc::new(w.meta().clone()),
        w.reader().unwrap(),
        w.body_offset(),
    );
    w.write(b"abc").unwrap();
    new_leader.progress(3);
    w.finish().unwrap();
    new_leader.done(3);
    let bodies = rt().block_on(async move {
        let mut v = Vec::new();
        for f in followers_after {
            v.push(follow(f).await.unwrap().0);
        }
        v
    });
    assert!(bodies.iter().all(|b| b == b"abc"));
}

#[test]
fn dropped_handle_is_a_failure_and_mid_body_failure_aborts_followers() {
    let hash = 7;
    let inflight = Inflight::new();
    // Before the head: dropping the handle makes followers retry.
    let Join::Leader(leader) = inflight.join(hash) else {
        panic!()
    };
    let Join::Follower(f) = inflight.join(hash) else {
        panic!()
    };
    drop(leader);
    assert!(matches!(rt().block_on(f.wait_head(LOCK)), WaitHead::Retry));
    assert!(inflight.is_empty());

    // After the head: followers get the bytes written so far, then an error.
    let d = tempfile::tempdir().unwrap();
    let tmp = d.path().join("f");
    std::fs::write(&tmp, b"0123456789").unwrap();
    let Join::Leader(mut leader) = inflight.join(hash) else {
        panic!()
    };
    let Join::Follower(f) = inflight.join(hash) else {
        panic!()
    };
    let mut m = crate::ObjectMeta::new("k", 200, SystemTime::now());
    m.body_len = 100;
    leader.publish_head(Arc::new(m), Arc::new(std::fs::File::open(&tmp).unwrap()), 0);
    leader.progress(4);
    let res = rt().block_on(async {
        let WaitHead::Head(head) = f.wait_head(LOCK).await else {
            panic!()
        };
        let mut r = f.reader(head);
        let mut buf = [0u8; 100];
        let n = r.read_chunk(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"0123");
        drop(leader);
        r.read_chunk(&mut buf).await
    });
    assert!(matches!(res, Err(FillError::LeaderFailed)));
}

#[test]
fn uncacheable_and_lock_timeout() {
    let inflight = Inflight::new();
    let Join::Leader(leader) = inflight.join(1) else {
        panic!()
    };
    let Join::Follower(f) = inflight.join(1) else {
        panic!()
    };
    // Nobody publishes: the follower gives up after its cache_lock_timeout.
    let short = Duration::from_millis(50);
    assert!(matches!(
        rt().block_on(f.wait_head(short)),
        WaitHead::TimedOut
    ));
    leader.uncacheable();
    assert!(matches!(
        rt().block_on(f.wait_head(LOCK)),
        WaitHead::Uncacheable
    ));
    // The key is free again: the next joiner leads.
    assert!(matches!(inflight.join(1), Join::Leader(_)));
}

#[test]
fn a_late_follower_of_a_done_fill_gets_the_whole_body() {
    let d = tempfile::tempdir().unwrap();
    let tmp = d.path().join("f");
    std::fs::write(&tmp, b"hello").unwrap();
    let inflight = Inflight::new();
    let Join::Leader(mut leader) = inflight.join(9) else {
        panic!()
    };
    let Join::Follower(f) = inflight.join(9) else {
        panic!()
    };
    let mut m = crate::ObjectMeta::new("k", 200, SystemTime::now());
    m.body_len = 5;
    leader.publish_head(Arc::new(m), Arc::new(std::fs::File::open(&tmp).unwrap()), 0);
    leader.progress(5);
    leader.done(5);
    let (b, early) = rt().block_on(follow(f)).unwrap();
    assert_eq!(b, b"hello");
    assert!(!early);
    assert_eq!(
        known_len(&crate::ObjectMeta::new("k", 200, SystemTime::now())),
        None
    );
}
