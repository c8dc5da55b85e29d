//! `EDGECACHE_URING_DISABLE=1` forces the io_uring → threads fallback. In a binary of
//! its own: the variable is process-wide and would disturb io_uring tests beside it.

mod common;

use common::*;
use edge_aio::{Engine, Fallback, Mode, OpenOptions, SharedPool, URING_DISABLE_ENV};

#[test]
fn env_forces_the_thread_pool() {
    std::env::set_var(URING_DISABLE_ENV, "1");
    let cfg = config(Backend::IoUring);
    let pool = SharedPool::new(&cfg);
    let (e, why) = Engine::new(&cfg, &pool).unwrap();
    let why = why.expect("a fallback reason to log");
    assert!(matches!(why, Fallback::DisabledByEnv));
    println!("{why}");
    assert!(why.to_string().contains(URING_DISABLE_ENV));
    assert_eq!(e.mode(), Mode::Threads);
    assert_eq!(e.stats().snapshot().uring_fallbacks, 1);
    assert!(e.pool().is_some());

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let data = pattern(10_000);
    let (_dir, path) = file_with(&data, "f");
    tokio::task::LocalSet::new().block_on(&rt, async {
        let f = e.open(&path, &OpenOptions::new()).await.unwrap();
        let (r, buf) = e.read_exact_at(&f, 5, 9000, Vec::new()).await;
        r.unwrap();
        assert_eq!(buf, &data[5..9005]);
    });
}
