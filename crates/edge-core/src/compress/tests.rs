use super::*;

fn policy() -> Policy {
    Policy {
        codings: vec![Coding::Br, Coding::Gzip],
        types: edge_compress::DEFAULT_TYPES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        min_length: 1024,
        levels: Levels::default(),
        offload: false,
    }
}

fn facts(ct: &'static str, enc: Encoded) -> Facts<'static> {
    Facts {
        status: 200,
        content_type: Some(ct.as_bytes()),
        no_transform: false,
        encoded: enc,
        body_len: Some(10_000),
    }
}

fn ae(v: &str) -> Accepted {
    Accepted::parse([v.as_bytes()])
}

#[test]
fn plans() {
    let p = policy();
    let id = Encoded::Identity;
    assert_eq!(
        plan(&p, &ae("gzip, br"), &facts("text/html", id)),
        Plan::Encode(Coding::Br)
    );
    assert_eq!(
        plan(&p, &ae("gzip"), &facts("text/html", id)),
        Plan::Encode(Coding::Gzip)
    );
    assert_eq!(
        plan(&p, &ae("zstd"), &facts("text/html", id)),
        Plan::AsIs { vary: true }
    );
    assert_eq!(
        plan(&p, &ae("gzip"), &facts("image/png", id)),
        Plan::AsIs { vary: false }
    );
    let gz = Encoded::One(Coding::Gzip);
    assert_eq!(
        plan(&p, &ae("gzip"), &facts("text/html", gz)),
        Plan::AsIs { vary: true }
    );
    assert_eq!(
        plan(&p, &ae("br"), &facts("text/html", gz)),
        Plan::Decode(Coding::Gzip)
    );
    assert_eq!(
        plan(&p, &ae("br, identity;q=0"), &facts("text/html", gz)),
        Plan::AsIs { vary: true },
        "nothing better to send"
    );
    let mut nt = facts("text/html", id);
    nt.no_transform = true;
    assert_eq!(plan(&p, &ae("gzip"), &nt), Plan::AsIs { vary: false });
}

#[test]
fn block_values_finds_exactly_the_named_lines() {
    // The first version: split at every line end, find the colon, compare the name.
    fn reference<'a>(block: &'a [u8], name: &str) -> Vec<&'a [u8]> {
        block
            .split(|&b| b == b'\n')
            .filter_map(|line| {
                let colon = line.iter().position(|&b| b == b':')?;
                if !line[..colon].eq_ignore_ascii_case(name.as_bytes()) {
                    return None;
                }
                let v = &line[colon + 1..];
                let v = v.strip_suffix(b"\r").unwrap_or(v);
                let start = v.iter().position(|&b| b != b' ' && b != b'\t');
                Some(&v[start.unwrap_or(v.len())..])
            })
            .collect()
    }
    let block: &[u8] = b"Content-Type: text/html\r\nContent-Type-X: no\r\ncontent-type:a/b\r\n\
        X: Content-Type: no\r\nCache-Control:\t no-transform \r\nCACHE-CONTROL: max-age=1\n\
        Content-Type\r\n:empty\r\n\r\nContent-Encoding: gzip";
    for name in [
        "content-type",
        "cache-control",
        "content-encoding",
        "x",
        "etag",
        "",
    ] {
        let got: Vec<&[u8]> = block_values(block, name).collect();
        assert_eq!(got, reference(block, name), "{name}");
    }
    assert_eq!(
        block_values(block, "content-type").collect::<Vec<_>>(),
        [&b"text/html"[..], b"a/b"]
    );
    assert_eq!(block_values(b"", "etag").next(), None);
}

#[test]
fn facts_of_block_reads_each_field_as_block_values_does() {
    for block in [
        &b"Content-Type: text/html\r\nCache-Control: max-age=1\r\n"[..],
        b"cache-control: public\r\nCACHE-CONTROL: no-transform\r\ncontent-type: a/b\r\nContent-Type: c/d\r\n",
        b"Content-Encoding: gzip\r\nContent-Type: text/css\r\n",
        b"Content-Encoding: identity\r\ncontent-encoding: br\r\n",
        b"Content-Encoding:\r\nX: y\r\n",
        b"Content-Type-Options: nosniff\r\nCache-Controls: no-transform\r\n",
        b"",
    ] {
        let f = facts_of_block(200, block, Some(7));
        assert_eq!(f.content_type, block_values(block, "content-type").next());
        let nt = edge_compress::no_transform(block_values(block, "cache-control"));
        assert_eq!(f.no_transform, nt);
        let enc = edge_compress::content_encoding(block_values(block, "content-encoding"));
        assert_eq!(f.encoded, enc);
    }
}

#[test]
fn transformed_heads() {
    let block = b"Content-Type: text/html\r\nContent-Length: 10\r\nETag: \"a\"\r\nVary: Origin\r\n";
    let enc = String::from_utf8(transform_block(block, Plan::Encode(Coding::Gzip))).unwrap();
    assert_eq!(
        enc,
        "Content-Type: text/html\r\nContent-Encoding: gzip\r\nETag: \"a-gzip\"\r\nVary: Origin, Accept-Encoding\r\n"
    );
    let gz = b"Content-Type: text/html\r\nContent-Encoding: gzip\r\nETag: \"a\"\r\n";
    let dec = String::from_utf8(transform_block(gz, Plan::Decode(Coding::Gzip))).unwrap();
    assert_eq!(
        dec,
        "Content-Type: text/html\r\nETag: W/\"a\"\r\nVary: Accept-Encoding\r\n"
    );
    assert_eq!(
        transform_block(b"A: b\r\n", Plan::AsIs { vary: true }),
        b"A: b\r\nVary: Accept-Encoding\r\n"
    );
    let vals: Vec<&[u8]> = block_values(block, "etag").collect();
    assert_eq!(vals, vec![&b"\"a\""[..]]);
}

/// A full queue: a response that has not started compressing goes out as it is
/// (counted); one whose filter exists keeps compressing (its chunk runs inline).
#[test]
fn a_full_pool_refuses_new_compressions_and_counts_them() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    let setup = PoolSetup::from_config(&CompressPool {
        threads: Some(1),
        max_queue: 1,
        cpus: None,
        priority: crate::config::PoolPriority::Idle,
    });
    let c = Compressor::new(setup.clone());
    let stats = WorkerStats::default();
    let mut p = policy();
    p.offload = true;
    local.block_on(&rt, async {
        let mut early = c.encoder(&p, Coding::Gzip, &stats).expect("room at first");
        let o = c.offload(&stats).unwrap();
        let busy = |ms: u64| {
            let o = o.clone();
            async move {
                o.run(move || std::thread::sleep(std::time::Duration::from_millis(ms)))
                    .await
            }
        };
        let a = tokio::task::spawn_local(busy(400));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let b = tokio::task::spawn_local(busy(10)); // waits in the queue
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(setup.queue_depth(), 1);
        assert!(c.saturated(&p));
        assert!(
            c.encoder(&p, Coding::Br, &stats).is_none(),
            "no room: as it is"
        );
        assert_eq!(stats.compress_overloads.load(Relaxed), 1);
        // Inline compression is never refused.
        let mut inline = p.clone();
        inline.offload = false;
        assert!(c.encoder(&inline, Coding::Br, &stats).is_some());
        // The filter made before the overload still works (its chunk runs inline).
        let mut z = Vec::new();
        early.push(b"still compressing", &mut z).await.unwrap();
        early.finish(&mut z).await.unwrap();
        let back = edge_compress::codec::decode_all(Coding::Gzip, &z).unwrap();
        assert_eq!(back, b"still compressing");
        a.await.unwrap().unwrap();
        b.await.unwrap().unwrap();
        assert!(!c.saturated(&p));
    });
}

#[test]
fn inline_filters_round_trip_and_count() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let setup = PoolSetup::from_config(&CompressPool::default());
    let c = Compressor::new(setup);
    let stats = WorkerStats::default();
    let data: Vec<u8> = b"<p>edge cache text</p>\n".repeat(2000);
    rt.block_on(async {
        let mut f = c.encoder(&policy(), Coding::Gzip, &stats).unwrap();
        let mut z = Vec::new();
        for part in data.chunks(5000) {
            f.push(part, &mut z).await.unwrap();
        }
        f.finish(&mut z).await.unwrap();
        f.account(&stats);
        let back = edge_compress::codec::decode_all(Coding::Gzip, &z).unwrap();
        assert_eq!(back, data);
        let mut d = c.decoder(&policy(), Coding::Gzip, &stats).unwrap();
        let mut plain = Vec::new();
        d.push(&z, &mut plain).await.unwrap();
        d.finish(&mut plain).await.unwrap();
        assert_eq!(plain, data);
    });
    assert_eq!(
        stats.compress_responses[Coding::Gzip.index()].load(Relaxed),
        1
    );
    assert_eq!(stats.compress_bytes_in.load(Relaxed), data.len() as u64);
    assert!(stats.compress_bytes_out.load(Relaxed) < data.len() as u64 / 5);
}
