//! The index snapshot: written at a clean shutdown, read (and deleted) at the next start,
//! so a restart serves its whole cache at once instead of after the loader has read
//! every header.
//!
//! How it fits: [`crate::Cache::write_snapshot`] is called by the server once every
//! worker has stopped; [`crate::Cache::open`] reads the file before the loader starts
//! and deletes it, whatever it held, so that no later run can read it again. Nothing in
//! a snapshot is trusted beyond what the index would trust anyway: every lookup still
//! opens the file and checks its inode, header, key and size, and the loader still
//! walks the directories, now by `readdir` alone for the files the snapshot named
//! (their inode comes with the directory entry). It indexes what the snapshot did not
//! know, and at the end it drops what the snapshot named but the disk no longer has.
//! So a snapshot that is stale (another process wrote to the directory after it) costs
//! misses, never a wrong answer.
//!
//! Layout (little-endian), `<cache path>/index.snapshot`:
//! ```text
//! magic "EDGEIDX1", version u32, levels (u8 count + bytes)
//! directories: u32 count, each u32 length + path bytes
//! objects: u64 count, each hash u128, inode u64, blocks u32, directory u32, flags u8
//!          (least recently used first)
//! tags: u64 count, each hash u128, u16 count, each u16 length + bytes
//! primary records: u64 count, each primary u128, u16 count of Vary names (u16 length
//!          + bytes each), u32 count of variants (u128 each)
//! xxh3-64 of everything before it
//! ```

use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;

use twox_hash::XxHash3_64;

/// The snapshot's file name under the cache directory (not a hash name, so the loader
/// never takes it for an object).
pub const FILE: &str = "index.snapshot";
const MAGIC: &[u8; 8] = b"EDGEIDX1";
const VERSION: u32 = 1;

/// What the index puts in a snapshot and takes back from one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Image {
    pub dirs: Vec<String>,
    pub objects: Vec<ObjectRec>,
    pub tags: Vec<(u128, Vec<String>)>,
    pub records: Vec<(u128, Vec<String>, Vec<u128>)>,
}

/// One object as the snapshot keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRec {
    pub hash: u128,
    pub ino: u64,
    pub blocks: u32,
    /// Index into [`Image::dirs`].
    pub dir: u32,
    pub flags: u8,
}

pub fn path(root: &std::path::Path) -> PathBuf {
    root.join(FILE)
}

/// Encodes `img` for a cache with these `levels`.
pub fn encode(img: &Image, levels: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(64 + img.objects.len() * 33);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.push(levels.len() as u8);
    b.extend_from_slice(levels);
    b.extend_from_slice(&(img.dirs.len() as u32).to_le_bytes());
    for d in &img.dirs {
        b.extend_from_slice(&(d.len() as u32).to_le_bytes());
        b.extend_from_slice(d.as_bytes());
    }
    b.extend_from_slice(&(img.objects.len() as u64).to_le_bytes());
    for o in &img.objects {
        b.extend_from_slice(&o.hash.to_le_bytes());
        b.extend_from_slice(&o.ino.to_le_bytes());
        b.extend_from_slice(&o.blocks.to_le_bytes());
        b.extend_from_slice(&o.dir.to_le_bytes());
        b.push(o.flags);
    }
    b.extend_from_slice(&(img.tags.len() as u64).to_le_bytes());
    for (h, names) in &img.tags {
        b.extend_from_slice(&h.to_le_bytes());
        put_strs(&mut b, names);
    }
    b.extend_from_slice(&(img.records.len() as u64).to_le_bytes());
    for (p, vary, variants) in &img.records {
        b.extend_from_slice(&p.to_le_bytes());
        put_strs(&mut b, vary);
        b.extend_from_slice(&(variants.len() as u32).to_le_bytes());
        for v in variants {
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
    let sum = XxHash3_64::oneshot(&b);
    b.extend_from_slice(&sum.to_le_bytes());
    b
}

fn put_strs(b: &mut Vec<u8>, strs: &[String]) {
    b.extend_from_slice(&(strs.len() as u16).to_le_bytes());
    for s in strs {
        b.extend_from_slice(&(s.len() as u16).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
    }
}

/// Decodes a snapshot written for a cache with these `levels`. Any damage (a torn
/// write, another version, other levels) is an error, and the snapshot is then ignored.
pub fn decode(buf: &[u8], levels: &[u8]) -> Result<Image, String> {
    if buf.len() < MAGIC.len() + 8 || &buf[..8] != MAGIC {
        return Err("not a snapshot".into());
    }
    let (body, sum) = buf.split_at(buf.len() - 8);
    if XxHash3_64::oneshot(body).to_le_bytes() != sum {
        return Err("checksum mismatch".into());
    }
    let mut r = Reader { b: body, at: 8 };
    if r.u32()? != VERSION {
        return Err("another snapshot version".into());
    }
    let n = r.u8()? as usize;
    if r.take(n)? != levels {
        return Err("written for other levels".into());
    }
    let mut img = Image::default();
    let dirs = r.u32()? as usize;
    for _ in 0..dirs {
        let len = r.u32()? as usize;
        img.dirs.push(r.str(len)?);
    }
    let objects = r.count(33)?;
    img.objects.reserve(objects);
    for _ in 0..objects {
        let o = ObjectRec {
            hash: r.u128()?,
            ino: r.u64()?,
            blocks: r.u32()?,
            dir: r.u32()?,
            flags: r.u8()?,
        };
        if o.dir as usize >= img.dirs.len() {
            return Err("object names a missing directory".into());
        }
        img.objects.push(o);
    }
    for _ in 0..r.count(18)? {
        let h = r.u128()?;
        img.tags.push((h, r.strs()?));
    }
    for _ in 0..r.count(22)? {
        let p = r.u128()?;
        let vary = r.strs()?;
        let n = r.u32()? as usize;
        let mut variants = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            variants.push(r.u128()?);
        }
        img.records.push((p, vary, variants));
    }
    if r.at != body.len() {
        return Err("trailing bytes".into());
    }
    Ok(img)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or("truncated")?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn u128(&mut self) -> Result<u128, String> {
        Ok(u128::from_le_bytes(self.take(16)?.try_into().expect("16")))
    }
    /// A count of items of at least `min` bytes each, checked against what is left (a
    /// damaged count must not reserve gigabytes).
    fn count(&mut self, min: usize) -> Result<usize, String> {
        let n = usize::try_from(self.u64()?).map_err(|_| "count")?;
        if n.saturating_mul(min) > self.b.len() - self.at {
            return Err("count larger than the file".into());
        }
        Ok(n)
    }
    fn str(&mut self, len: usize) -> Result<String, String> {
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| "not UTF-8".into())
    }
    fn strs(&mut self) -> Result<Vec<String>, String> {
        let n = self.u16()? as usize;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let len = self.u16()? as usize;
            out.push(self.str(len)?);
        }
        Ok(out)
    }
}

/// Writes `bytes` as the snapshot of the cache at `root`: a temp file renamed into place.
pub fn write(root: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = root.join(format!("{FILE}.tmp"));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path(root))
}

/// Reads and deletes the snapshot of the cache at `root` (None when there is none).
pub fn take(root: &std::path::Path) -> Option<io::Result<Vec<u8>>> {
    let p = path(root);
    let r = fs::read(&p);
    if matches!(&r, Err(e) if e.kind() == io::ErrorKind::NotFound) {
        return None;
    }
    let _ = fs::remove_file(&p);
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Image {
        Image {
            dirs: vec!["http://h/a/".into(), String::new()],
            objects: vec![
                ObjectRec {
                    hash: 7,
                    ino: 9,
                    blocks: 1,
                    dir: 0,
                    flags: 1,
                },
                ObjectRec {
                    hash: u128::MAX,
                    ino: u64::MAX,
                    blocks: 3,
                    dir: 1,
                    flags: 9,
                },
            ],
            tags: vec![(u128::MAX, vec!["t1".into(), "t2".into()])],
            records: vec![(5, vec!["accept-encoding".into()], vec![7, 8])],
        }
    }

    #[test]
    fn round_trip() {
        let b = encode(&image(), &[1, 2]);
        assert_eq!(decode(&b, &[1, 2]).unwrap(), image());
        assert!(decode(&b, &[2]).is_err(), "other levels");
        // Many objects: the counts' plausibility checks use the true record sizes.
        let mut big = image();
        for i in 0..1000 {
            big.objects.push(ObjectRec {
                hash: i,
                ino: 1,
                blocks: 1,
                dir: 0,
                flags: 1,
            });
        }
        assert_eq!(decode(&encode(&big, &[]), &[]).unwrap(), big);
    }

    #[test]
    fn every_truncation_and_flipped_byte_is_an_error_not_a_panic() {
        let b = encode(&image(), &[1, 2]);
        for n in 0..b.len() {
            assert!(decode(&b[..n], &[1, 2]).is_err(), "cut at {n}");
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(decode(&c, &[1, 2]).is_err(), "flip at {i}");
        }
    }
}
