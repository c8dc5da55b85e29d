//! On-disk storage: one file per object, written to a temp file and renamed when whole.
//!
//! How it fits: [`crate::Cache`] calls [`Layout::path_for`] to find an object,
//! [`TempObject`] to write one (the server streams the origin body into it), and
//! [`read_header`] to validate one (the loader at start, and lookups that fall back to
//! the disk before the loader is done). Nothing here touches the index.
//!
//! File layout (all integers little-endian), see `docs/cache.md`:
//! ```text
//! 0   8  magic "EDGCACHE"
//! 8   4  format version (FORMAT_VERSION)
//! 12  4  meta length M
//! 16  8  body offset B (>= 64 + M: a multiple of 4096, or when B + L <= 4096 the
//!        header's end plus HEADER_SLACK: a small object is packed in one block)
//! 24  8  body length L
//! 32 16  key hash (xxh3-128 of the variant key)
//! 48  8  reserved (0)
//! 56  8  xxh3-64 of bytes 0..56 followed by the M meta bytes
//! 64  M  ObjectMeta (meta.rs encoding)
//! ..     zero padding up to B
//! B   L  body
//! ```
//! A file is servable only when the magic, version and checksum match, the key hashes
//! to the file name, and the file size is exactly B + L. Because the rename happens only
//! after the full body is written and the header rewritten with the final length and
//! body checksum, a killed process leaves either the old object, the new object, or a
//! `.tmp.` file that the loader deletes.

use bytes::Bytes;
use std::fs::{self, File, OpenOptions};
use std::hash::Hasher as _;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use twox_hash::XxHash3_64;

use crate::key::{hash_hex, KeyHash};
use crate::meta::{MetaError, ObjectMeta, BODY_LEN_UNKNOWN};

/// First 8 bytes of every object file.
pub const MAGIC: &[u8; 8] = b"EDGCACHE";
/// Bump when the layout or the meta encoding changes: older files are then removed by
/// the loader instead of being misread, unless [`read_header`] knows how to upgrade
/// them. Version 2: the stored header block starts with the response's `Date` line
/// (version 1 files are read, and get one from their stored date). Version 3: the meta
/// ends with the body's id (versions 1 and 2 are read, with id 0: see
/// [`ObjectMeta::body_id`]).
pub const FORMAT_VERSION: u32 = 3;
/// Size of the fixed prefix before the meta bytes.
pub const PREFIX_LEN: usize = 64;
/// Bodies start at a multiple of this (O_DIRECT alignment; room for in-place refresh).
pub const BODY_ALIGN: u64 = 4096;
/// Free bytes always left between the meta and the body, so that a 304 refresh with
/// slightly longer headers can still rewrite the header in place.
pub const HEADER_SLACK: usize = 256;
/// Largest meta block a reader accepts (a corrupt length must not allocate gigabytes).
pub const MAX_META_LEN: usize = 1 << 20;
/// Minimum time between two log lines about write errors.
pub const WRITE_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Marker in temp file names: `<hash>.tmp.<process token>.<n>`.
pub const TMP_MARKER: &str = ".tmp.";

/// Where objects live: `<root>/<level dirs>/<32 hex>`.
#[derive(Clone, Debug)]
pub struct Layout {
    pub root: PathBuf,
    /// nginx `levels`: `[1, 2]` means `/c/29/` taken from the END of the hex name.
    pub levels: Vec<u8>,
}

/// Why `levels` was rejected.
pub fn validate_levels(levels: &[u8]) -> Result<(), String> {
    if levels.len() > 3 {
        return Err(format!("levels: at most 3 levels, got {}", levels.len()));
    }
    if let Some(l) = levels.iter().find(|&&l| l != 1 && l != 2) {
        return Err(format!("levels: each level is 1 or 2 characters, got {l}"));
    }
    Ok(())
}

impl Layout {
    /// The directory an object lives in.
    pub fn dir_for(&self, hash: KeyHash) -> PathBuf {
        let mut dir = PathBuf::with_capacity(self.root.as_os_str().len() + 8);
        self.push_dirs(&mut dir, &crate::key::hash_hex_bytes(hash));
        dir
    }

    fn push_dirs(&self, dir: &mut PathBuf, hex: &[u8; 32]) {
        use std::os::unix::ffi::OsStrExt;
        dir.push(&self.root);
        let mut end = hex.len();
        for &l in &self.levels {
            let start = end - l as usize;
            dir.push(std::ffi::OsStr::from_bytes(&hex[start..end]));
            end = start;
        }
    }

    /// The final path of an object: one allocation, the hex digits formatted on the
    /// stack.
    pub fn path_for(&self, hash: KeyHash) -> PathBuf {
        use std::os::unix::ffi::OsStrExt;
        let hex = crate::key::hash_hex_bytes(hash);
        let mut p = PathBuf::with_capacity(self.root.as_os_str().len() + 8 + hex.len());
        self.push_dirs(&mut p, &hex);
        p.push(std::ffi::OsStr::from_bytes(&hex));
        p
    }
}

/// A validated object header.
#[derive(Debug, Clone)]
pub struct StoredHeader {
    pub meta: ObjectMeta,
    pub hash: KeyHash,
    pub body_offset: u64,
}

/// Why a file on disk is not servable.
#[derive(Debug)]
pub enum StorageError {
    Io(io::Error),
    BadMagic,
    /// Written by another format version (removed by the loader).
    OldVersion(u32),
    BadChecksum,
    BadMeta(MetaError),
    /// Size on disk differs from body offset + body length (cut short or grown).
    BadSize {
        expected: u64,
        actual: u64,
    },
    /// The stored key does not hash to the expected name.
    WrongKey,
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageError::Io(e) => write!(f, "{e}"),
            StorageError::BadMagic => f.write_str("bad magic"),
            StorageError::OldVersion(v) => {
                write!(f, "format version {v}, expected {FORMAT_VERSION}")
            }
            StorageError::BadChecksum => f.write_str("header checksum mismatch"),
            StorageError::BadMeta(e) => write!(f, "{e}"),
            StorageError::BadSize { expected, actual } => {
                write!(f, "file size {actual}, expected {expected}")
            }
            StorageError::WrongKey => f.write_str("key does not match file name"),
        }
    }
}

impl std::error::Error for StorageError {}

impl From<io::Error> for StorageError {
    fn from(e: io::Error) -> Self {
        StorageError::Io(e)
    }
}

/// Where the body of a new object starts, given the encoded header's length and the
/// body length when it is known: right after the header and its slack when the whole
/// object then fits in one block (a small object costs one block on disk and one read),
/// else at the next multiple of [`BODY_ALIGN`] (O_DIRECT reads, and room to grow the
/// header in place).
pub fn body_offset_for(header_len: usize, body_len: u64) -> u64 {
    let needed = (header_len + HEADER_SLACK) as u64;
    if body_len != BODY_LEN_UNKNOWN && needed.saturating_add(body_len) <= BODY_ALIGN {
        needed
    } else {
        needed.div_ceil(BODY_ALIGN) * BODY_ALIGN
    }
}

/// Whether a header's body offset is one the writer can have chosen: a multiple of
/// [`BODY_ALIGN`], or packed (the whole object within the first block).
fn valid_body_offset(body_offset: u64, body_len: u64) -> bool {
    body_offset.is_multiple_of(BODY_ALIGN) || body_offset.saturating_add(body_len) <= BODY_ALIGN
}

/// Encode the header region (prefix + meta + padding) for `meta`; its length is the body
/// offset. `body_offset` forces a given offset (in-place rewrite); `None` picks one with
/// [`body_offset_for`] from `meta.body_len`.
pub fn encode_header(
    hash: KeyHash,
    meta: &ObjectMeta,
    body_offset: Option<u64>,
) -> Result<Vec<u8>, NoRoom> {
    let (mut buf, offset) = encode_unpadded(hash, meta, body_offset, true)?;
    buf.resize(offset as usize, 0);
    Ok(buf)
}

/// The body offset [`encode_header`] picks for `meta` (`None`), computed without
/// encoding.
pub fn header_region_len(meta: &ObjectMeta) -> u64 {
    body_offset_for(PREFIX_LEN + meta.encoded_len(), meta.body_len)
}

/// The prefix and the meta (without the padding up to the body offset), in a buffer
/// with room for the padding when `to_offset`; and the offset.
fn encode_unpadded(
    hash: KeyHash,
    meta: &ObjectMeta,
    body_offset: Option<u64>,
    to_offset: bool,
) -> Result<(Vec<u8>, u64), NoRoom> {
    let meta_len = meta.encoded_len();
    let header_len = PREFIX_LEN + meta_len;
    let offset = match body_offset {
        Some(off) if (header_len as u64) <= off => off,
        Some(_) => return Err(NoRoom),
        None => body_offset_for(header_len, meta.body_len),
    };
    // One allocation (the meta's length is known without encoding).
    let mut buf = Vec::with_capacity(if to_offset {
        offset as usize
    } else {
        header_len
    });
    buf.extend_from_slice(&[0u8; PREFIX_LEN]);
    meta.encode(&mut buf);
    debug_assert_eq!(buf.len(), header_len, "ObjectMeta::encoded_len");
    buf[0..8].copy_from_slice(MAGIC);
    buf[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    buf[12..16].copy_from_slice(&(meta_len as u32).to_le_bytes());
    buf[16..24].copy_from_slice(&offset.to_le_bytes());
    buf[24..32].copy_from_slice(&meta.body_len.to_le_bytes());
    buf[32..48].copy_from_slice(&hash.to_le_bytes());
    let sum = header_checksum(&buf[..56], &buf[PREFIX_LEN..]);
    buf[56..64].copy_from_slice(&sum.to_le_bytes());
    Ok((buf, offset))
}

/// The new header does not fit before the existing body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoom;

fn header_checksum(prefix: &[u8], meta: &[u8]) -> u64 {
    let mut h = XxHash3_64::new();
    h.write(prefix);
    h.write(meta);
    h.finish()
}

/// How many bytes the header region has (prefix + meta), from the first bytes of a
/// file (at least [`PREFIX_LEN`]; a reader asks for the first block and reads more only
/// when this says so).
pub fn header_len(first: &[u8]) -> Result<usize, StorageError> {
    if first.len() < PREFIX_LEN || &first[0..8] != MAGIC {
        return Err(StorageError::BadMagic);
    }
    let version = u32::from_le_bytes(first[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION && version != 1 && version != 2 {
        return Err(StorageError::OldVersion(version));
    }
    let meta_len = u32::from_le_bytes(first[12..16].try_into().expect("4 bytes")) as usize;
    if meta_len > MAX_META_LEN {
        return Err(StorageError::BadChecksum);
    }
    Ok(PREFIX_LEN + meta_len)
}

/// Validates a header read from a file of `file_len` bytes (`buf` holds at least
/// [`header_len`] bytes from offset 0) and decodes it. `expect` is the hash the file
/// name promises. Sans-I/O: the same check for the loader's blocking reads and a
/// lookup's reads through the server's I/O backend.
pub fn decode_header(
    buf: &[u8],
    expect: KeyHash,
    file_len: u64,
) -> Result<StoredHeader, StorageError> {
    let end = header_len(buf)?;
    if buf.len() < end {
        return Err(StorageError::BadChecksum);
    }
    let version = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes"));
    let body_offset = u64::from_le_bytes(buf[16..24].try_into().expect("8 bytes"));
    let body_len = u64::from_le_bytes(buf[24..32].try_into().expect("8 bytes"));
    let hash = u128::from_le_bytes(buf[32..48].try_into().expect("16 bytes"));
    let sum = u64::from_le_bytes(buf[56..64].try_into().expect("8 bytes"));
    let meta_bytes = &buf[PREFIX_LEN..end];
    if header_checksum(&buf[..56], meta_bytes) != sum {
        return Err(StorageError::BadChecksum);
    }
    let mut meta = if version >= 3 {
        ObjectMeta::decode(meta_bytes)
    } else {
        ObjectMeta::decode_before_body_id(meta_bytes)
    }
    .map_err(StorageError::BadMeta)?;
    if version == 1 {
        // Version 1 kept `Date` out of the block; hits sent the current time.
        let mut block = crate::policy::date_line(meta.date, meta.response_time);
        block.extend_from_slice(&meta.header_block);
        meta.header_block = block;
    }
    if hash != expect || crate::key::key_hash(&meta.key) != hash {
        return Err(StorageError::WrongKey);
    }
    if meta.body_len != body_len
        || body_len == BODY_LEN_UNKNOWN
        || !valid_body_offset(body_offset, body_len)
        || body_offset < end as u64
    {
        return Err(StorageError::BadChecksum);
    }
    let expected = body_offset.saturating_add(body_len);
    if file_len != expected {
        return Err(StorageError::BadSize {
            expected,
            actual: file_len,
        });
    }
    Ok(StoredHeader {
        meta,
        hash,
        body_offset,
    })
}

/// Read and validate the header of an open object file (blocking reads). Reads only
/// the header region, never the body. `expect` is the hash the file name promises.
pub fn read_header(file: &File, expect: KeyHash) -> Result<StoredHeader, StorageError> {
    let mut buf = vec![0u8; BODY_ALIGN as usize];
    let n = read_full_at(file, &mut buf, 0)?;
    buf.truncate(n);
    let need = header_len(&buf)?;
    if need > buf.len() {
        let have = buf.len();
        buf.resize(need, 0);
        if read_full_at(file, &mut buf[have..], have as u64)? != need - have {
            return Err(StorageError::BadChecksum);
        }
    }
    decode_header(&buf, expect, file.metadata()?.len())
}

/// The xxh3-64 of `len` body bytes at `offset` of `file` (the loader's `cache_verify`),
/// read in 256 KiB pieces.
pub fn body_checksum_of(file: &File, offset: u64, len: u64) -> io::Result<u64> {
    let mut h = XxHash3_64::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut done = 0u64;
    while done < len {
        let want = ((len - done) as usize).min(buf.len());
        let n = read_full_at(file, &mut buf[..want], offset + done)?;
        if n < want {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "body shorter than its header says",
            ));
        }
        h.write(&buf[..n]);
        done += n as u64;
    }
    Ok(h.finish())
}

/// `pread` until `buf` is full or EOF; returns the bytes read.
pub fn read_full_at(file: &File, buf: &mut [u8], mut off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], off) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// A committed object: what the index needs to know about the file.
#[derive(Debug, Clone)]
pub struct Committed {
    pub meta: ObjectMeta,
    pub hash: KeyHash,
    pub body_offset: u64,
    /// Bytes on disk (file size rounded up to whole blocks).
    pub disk_size: u64,
    /// Inode of the final file (detects replacement between index read and open).
    pub ino: u64,
}

/// Bytes a file of `len` bytes occupies (rounded up to 4 KiB blocks).
pub fn disk_size_of(len: u64) -> u64 {
    len.div_ceil(BODY_ALIGN) * BODY_ALIGN
}

/// An object being written to `<final>.tmp.<token>.<n>`; renamed into place by
/// [`TempObject::commit`]. Dropping it without commit removes the temp file.
pub struct TempObject {
    /// The one descriptor of the temp file: the writer, the followers' fill head and
    /// the commit share it (no `dup` per handle).
    file: Option<Arc<File>>,
    tmp_path: PathBuf,
    final_path: PathBuf,
    hash: KeyHash,
    meta: ObjectMeta,
    body_offset: u64,
    written: u64,
    hasher: XxHash3_64,
    committed: bool,
}

impl std::fmt::Debug for TempObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TempObject")
            .field("tmp_path", &self.tmp_path)
            .field("written", &self.written)
            .finish()
    }
}

impl TempObject {
    /// Create the temp file (and its directories). The header is written by the commit
    /// only (nothing reads a temp file's header: followers get the head from the fill,
    /// the loader deletes temp files), so the body is written first at its offset.
    /// `token` makes temp names unique per process, so the loader only removes temp
    /// files left by earlier processes.
    pub fn create(
        layout: &Layout,
        hash: KeyHash,
        meta: ObjectMeta,
        token: &str,
        seq: u64,
    ) -> io::Result<TempObject> {
        let dir = layout.dir_for(hash);
        let tmp_path = dir.join(format!("{}{TMP_MARKER}{token}.{seq}", hash_hex(hash)));
        let file = match create_new(&tmp_path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&dir)?;
                create_new(&tmp_path)?
            }
            Err(e) => return Err(e),
        };
        Ok(TempObject::new(layout, hash, meta, file, tmp_path))
    }

    /// The object written to a [`SpareFile`] made ahead of time: no file system call
    /// (the commit makes the object's directories if they are missing).
    pub fn on_spare(
        layout: &Layout,
        hash: KeyHash,
        meta: ObjectMeta,
        mut spare: SpareFile,
    ) -> io::Result<TempObject> {
        let (file, path) = spare.0.take().ok_or_else(closed)?;
        Ok(TempObject::new(layout, hash, meta, file, path))
    }

    /// From here the temp file's name is ours to remove (when dropped uncommitted).
    fn new(
        layout: &Layout,
        hash: KeyHash,
        mut meta: ObjectMeta,
        file: File,
        tmp_path: PathBuf,
    ) -> TempObject {
        meta.normalize_times();
        TempObject {
            file: Some(Arc::new(file)),
            tmp_path,
            final_path: layout.path_for(hash),
            hash,
            // The header is encoded once, by the commit; only its length matters now.
            body_offset: header_region_len(&meta),
            meta,
            written: 0,
            hasher: XxHash3_64::new(),
            committed: false,
        }
    }

    /// Append body bytes (a positioned write at [`TempObject::next_offset`]).
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let file = self.file.as_ref().ok_or_else(closed)?;
        file.write_all_at(data, self.next_offset())?;
        self.record(data);
        Ok(())
    }

    /// Where the next body bytes go in the file.
    pub fn next_offset(&self) -> u64 {
        self.body_offset + self.written
    }

    /// Account for body bytes the caller wrote itself at [`TempObject::next_offset`]
    /// (through a file I/O backend of its own, on a handle from [`TempObject::reader`]).
    pub fn record(&mut self, data: &[u8]) {
        self.hasher.write(data);
        self.written += data.len() as u64;
    }

    /// Body bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Hash of the object's key (its file name).
    pub fn hash(&self) -> KeyHash {
        self.hash
    }

    /// Offset of the body in the file.
    pub fn body_offset(&self) -> u64 {
        self.body_offset
    }

    /// The metadata this object will be committed with.
    pub fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// A shared handle on the temp file (the same descriptor) for readers that stream
    /// the body while it is being written ([`crate::inflight`]) and for a caller's own
    /// writes; valid after the rename too.
    pub fn reader(&self) -> io::Result<Arc<File>> {
        self.file.clone().ok_or_else(closed)
    }

    /// Check the length, write the final header (length, body checksum) and rename the
    /// file into place. On any error the temp file is removed.
    pub fn commit(mut self) -> io::Result<Committed> {
        let plan = self.prepare_commit(&mut Vec::new())?;
        let file = self.file.as_ref().ok_or_else(closed)?;
        edge_aio::write_all_vectored_at(&**file, 0, &plan.parts)?;
        let ino = file.metadata()?.ino();
        rename_into_place(&plan.tmp_path, &plan.final_path)?;
        Ok(self.committed(ino))
    }

    /// The first half of a commit made by a caller doing its own I/O: checks the
    /// length and returns what to do: write the plan's parts in order at offset 0 of
    /// `file` (one `pwritev`), `fstat` it for its inode, rename `tmp_path` to
    /// `final_path`; then call [`TempObject::committed`]. Dropped before that, the temp
    /// file is removed.
    ///
    /// `held`: empty, or the whole body in parts, kept in memory by the caller instead
    /// of written (each already [`TempObject::record`]ed): taken, not copied, and put
    /// after the header and its padding, so one write stores both. The caller gets them
    /// back from the [`CommitIo`](crate::CommitIo) ([`CommitPlan::body_parts`]).
    pub fn prepare_commit(&mut self, held: &mut Vec<Bytes>) -> io::Result<CommitPlan> {
        let declared = self.meta.body_len;
        if declared != BODY_LEN_UNKNOWN && declared != self.written {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("body length {} != declared {declared}", self.written),
            ));
        }
        self.meta.body_len = self.written;
        self.meta.body_hash = self.hasher.finish();
        // Every check before `held` is taken: on an error it stays the caller's.
        let file = self.file.clone().ok_or_else(closed)?;
        let (header, offset) =
            encode_unpadded(self.hash, &self.meta, Some(self.body_offset), false)
                .map_err(|_| io::Error::other("header grew while writing"))?;
        // The padding after the meta is never read, so it is only written where the
        // file must reach the body offset by this write: before a held body, or when
        // there is no body. A body streamed to the file already lies past it (a hole
        // reads as zeros).
        let pad = !held.is_empty() || self.written == 0;
        let mut parts = Vec::with_capacity(2 + held.len());
        let mut gap = if pad {
            offset as usize - header.len()
        } else {
            0
        };
        parts.push(Bytes::from(header));
        while gap > 0 {
            let n = gap.min(ZEROS.len());
            parts.push(Bytes::from_static(&ZEROS[..n]));
            gap -= n;
        }
        let body_parts = held.len();
        parts.append(held);
        Ok(CommitPlan {
            parts,
            body_parts,
            file,
            tmp_path: self.tmp_path.clone(),
            final_path: self.final_path.clone(),
        })
    }

    /// The renamed file (inode `ino`) is in place.
    pub fn committed(mut self, ino: u64) -> Committed {
        self.committed = true;
        // Moved out, not cloned: nothing reads this writer's meta once it is committed
        // (the empty one put back allocates nothing).
        let meta = std::mem::replace(
            &mut self.meta,
            ObjectMeta::new(String::new(), 0, std::time::UNIX_EPOCH),
        );
        Committed {
            meta,
            hash: self.hash,
            body_offset: self.body_offset,
            disk_size: disk_size_of(self.body_offset + self.written),
            ino: ino_key(ino),
        }
    }
}

/// Renames a temp file to its object's path, making the object's directories when they
/// are missing (a temp file made ahead of time lives in the cache's root).
pub fn rename_into_place(tmp: &Path, fin: &Path) -> io::Result<()> {
    match fs::rename(tmp, fin) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => rename_making_dirs(tmp, fin),
        r => r,
    }
}

/// The second half of [`rename_into_place`], for a caller whose own rename found the
/// object's directories missing: makes them, then renames.
pub fn rename_making_dirs(tmp: &Path, fin: &Path) -> io::Result<()> {
    if let Some(dir) = fin.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::rename(tmp, fin)
}

fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
}

/// The name prefix of spare temp files (in the cache's root, before [`TMP_MARKER`]).
pub const SPARE_PREFIX: &str = "spare";

/// An empty temp file made ahead of a miss ([`make_spares`]), so that starting an
/// object costs no file system call when it is needed. Removed when dropped unused.
#[derive(Debug)]
pub struct SpareFile(Option<(File, PathBuf)>);

impl Drop for SpareFile {
    fn drop(&mut self) {
        if let Some((_, path)) = self.0.take() {
            let _ = fs::remove_file(path);
        }
    }
}

/// Creates `n` spare temp files in `root` (numbered from `seq`), each named like any
/// temp file of this process (`spare.tmp.<token>.<seq>`), so the loader of a later
/// process removes what a crash leaves. Returns those made before an error, if any.
pub fn make_spares(root: &Path, token: &str, seq: u64, n: u64) -> (Vec<SpareFile>, io::Result<()>) {
    let mut out = Vec::with_capacity(n as usize);
    for i in seq..seq + n {
        let path = root.join(format!("{SPARE_PREFIX}{TMP_MARKER}{token}.{i}"));
        match create_new(&path) {
            Ok(f) => out.push(SpareFile(Some((f, path)))),
            Err(e) => return (out, Err(e)),
        }
    }
    (out, Ok(()))
}

/// What [`TempObject::prepare_commit`] leaves to its caller.
#[derive(Debug)]
pub struct CommitPlan {
    /// Written in order at offset 0 by one `pwritev`: the header (prefix and meta),
    /// zeros up to the body offset where needed, then any held body.
    pub parts: Vec<Bytes>,
    /// How many of `parts`, at the end, are the held body.
    pub body_parts: usize,
    /// The temp file (its one descriptor, shared).
    pub file: Arc<File>,
    pub tmp_path: PathBuf,
    pub final_path: PathBuf,
}

/// Padding for the commit's write, referenced, never copied.
static ZEROS: [u8; BODY_ALIGN as usize] = [0; BODY_ALIGN as usize];

fn closed() -> io::Error {
    io::Error::other("object file already closed")
}

impl Drop for TempObject {
    fn drop(&mut self) {
        if !self.committed {
            // The fd closes with `file`; the name goes now so nothing can serve it.
            let _ = fs::remove_file(&self.tmp_path);
        }
    }
}

/// Rewrite only the header region of an existing object in place (a 304 refresh or a
/// soft purge). Fails with `NoRoom` (as `io::ErrorKind::Other`) when the new header does
/// not fit before the body; the caller then rewrites the whole file.
pub fn rewrite_header_in_place(
    path: &Path,
    hash: KeyHash,
    meta: &ObjectMeta,
    body_offset: u64,
    expect_ino: u64,
) -> Result<(), RewriteError> {
    let header = encode_header(hash, meta, Some(body_offset)).map_err(|_| RewriteError::NoRoom)?;
    let file = OpenOptions::new().write(true).open(path)?;
    if ino_key(file.metadata()?.ino()) != ino_key(expect_ino) {
        return Err(RewriteError::Replaced);
    }
    file.write_all_at(&header, 0)?;
    Ok(())
}

/// Why an in-place header rewrite did not happen.
#[derive(Debug)]
pub enum RewriteError {
    NoRoom,
    /// The file was replaced (or removed) since the index entry was made.
    Replaced,
    Io(io::Error),
}

impl From<io::Error> for RewriteError {
    fn from(e: io::Error) -> Self {
        RewriteError::Io(e)
    }
}

/// Copy an object's body from `src` into a new file with `meta` as header (used when a
/// refreshed header no longer fits in place).
pub fn rewrite_whole(
    layout: &Layout,
    hash: KeyHash,
    meta: ObjectMeta,
    src: &File,
    src_body_offset: u64,
    token: &str,
    seq: u64,
) -> io::Result<Committed> {
    let body_len = meta.body_len;
    if body_len == BODY_LEN_UNKNOWN {
        return Err(io::Error::other("rewriting an object of unknown length"));
    }
    let mut obj = TempObject::create(layout, hash, meta, token, seq)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut off = 0u64;
    while off < body_len {
        let want = (body_len - off).min(buf.len() as u64) as usize;
        let n = src.read_at(&mut buf[..want], src_body_offset + off)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "source body cut short",
            ));
        }
        obj.write(&buf[..n])?;
        off += n as u64;
    }
    obj.commit()
}

/// How the cache keeps and compares inode numbers: their low 32 bits (the index slot
/// has room for 32). The check they serve is "is this still the file that was indexed";
/// a replacement file with the same low 32 bits is as unlikely as one with the same
/// number (ext4's inode numbers are 32-bit), and every read checks the header's key,
/// hash and size anyway.
pub fn ino_key(ino: u64) -> u64 {
    ino & 0xffff_ffff
}

/// Unlink `path` only if it is still the file with inode `ino` (a newer object renamed
/// into the same name is left alone).
pub fn remove_if_ino(path: &Path, ino: u64) -> io::Result<()> {
    let md = fs::symlink_metadata(path)?;
    if ino_key(md.ino()) != ino_key(ino) {
        return Ok(());
    }
    fs::remove_file(path)
}

/// Read a whole file's body into memory (tests and small tools only).
pub fn read_body(file: &File, body_offset: u64, body_len: u64) -> io::Result<Vec<u8>> {
    let mut v = vec![0u8; body_len as usize];
    let n = read_full_at(file, &mut v, body_offset)?;
    v.truncate(n);
    Ok(v)
}

/// Counts write errors and rate-limits their logging (ENOSPC or EIO on every miss must
/// not flood the error log).
#[derive(Debug, Default)]
pub struct WriteErrors {
    count: AtomicU64,
    last: Mutex<Option<(Instant, String)>>,
}

impl WriteErrors {
    /// Record an error; returns true when the caller should log it now (at most once
    /// per [`WRITE_ERROR_LOG_INTERVAL`]).
    pub fn record(&self, context: &str, err: &io::Error) -> bool {
        self.count.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let should_log = match &*last {
            Some((t, _)) => now.duration_since(*t) >= WRITE_ERROR_LOG_INTERVAL,
            None => true,
        };
        let msg = format!("{context}: {err}");
        let at = match &*last {
            Some((t, _)) if !should_log => *t,
            _ => now,
        };
        *last = Some((at, msg));
        should_log
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The most recent error message, if any.
    pub fn last(&self) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref().map(|(_, m)| m.clone())
    }
}

/// Read a file's full content (tests).
#[cfg(test)]
pub(crate) fn read_all(path: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut v = Vec::new();
    File::open(path).unwrap().read_to_end(&mut v).unwrap();
    v
}

/// Quick checksum of a body (tests and tools).
pub fn body_checksum(body: &[u8]) -> u64 {
    XxHash3_64::oneshot(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::key_hash;
    use std::time::SystemTime;

    /// File names (the key hash) and stored body checksums outlive a build: these are
    /// the reference XXH3 values (computed with another implementation), so a change
    /// of hash crate or of its SIMD path that altered them would orphan every cache on
    /// disk. The body is over 1 MiB, through the vectorised long-input path, one-shot
    /// and streamed in uneven pieces as a writer feeds it.
    #[test]
    fn hashes_are_the_reference_xxh3_values() {
        let key = "http://example.com/video.mp4\u{3}1048576\u{3}7";
        assert_eq!(key_hash(key), 0x2701f475401311e01d4db2ee4a8e2242);
        let body: Vec<u8> = (0..(1u32 << 20) + 13)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        assert_eq!(body_checksum(&body), 0x18297d5a56301f20);
        let mut h = XxHash3_64::new();
        for piece in body.chunks(65_537) {
            h.write(piece);
        }
        assert_eq!(h.finish(), 0x18297d5a56301f20);
    }

    fn layout(dir: &Path) -> Layout {
        Layout {
            root: dir.to_path_buf(),
            levels: vec![1, 2],
        }
    }

    fn meta(key: &str, len: u64) -> ObjectMeta {
        let mut m = ObjectMeta::new(key, 200, SystemTime::now());
        m.header_block = b"Content-Type: text/plain\r\n".to_vec();
        m.body_len = len;
        m
    }

    fn write_obj(l: &Layout, key: &str, body: &[u8]) -> Committed {
        let h = key_hash(key);
        let mut t = TempObject::create(l, h, meta(key, body.len() as u64), "t", 0).unwrap();
        for c in body.chunks(1000) {
            t.write(c).unwrap();
        }
        t.commit().unwrap()
    }

    #[test]
    fn levels_name_dirs_from_the_end_like_nginx() {
        let l = Layout {
            root: "/c".into(),
            levels: vec![1, 2],
        };
        let h = 0xb7f54b2df7773722d382f4809d65029c_u128;
        assert_eq!(
            l.path_for(h),
            Path::new("/c/c/29/b7f54b2df7773722d382f4809d65029c")
        );
        assert!(validate_levels(&[1, 2]).is_ok());
        assert!(validate_levels(&[3]).is_err());
        assert!(validate_levels(&[1, 1, 1, 1]).is_err());
    }

    #[test]
    fn round_trip_body_aligned_and_checksummed() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let body: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let c = write_obj(&l, "http://x/a", &body);
        assert_eq!(c.body_offset % BODY_ALIGN, 0);
        assert_eq!(c.meta.body_hash, body_checksum(&body));
        let f = File::open(l.path_for(c.hash)).unwrap();
        let h = read_header(&f, c.hash).unwrap();
        assert_eq!(h.meta, c.meta);
        assert_eq!(read_body(&f, h.body_offset, h.meta.body_len).unwrap(), body);
        // No temp file left behind.
        let names: Vec<_> = fs::read_dir(l.dir_for(c.hash)).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    /// A commit plan's parts, written in order, make the file a reader accepts: the
    /// header `encode_header` makes, then the held body at the body offset, with the
    /// padding written only where the file must reach that offset; a streamed body is
    /// not rewritten (only the unpadded header), and the hole before it reads as zeros.
    #[test]
    fn a_commit_plans_parts_read_back_as_the_object() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        for (len, held, streamed) in [
            (300u64, true, false),
            (10_000, true, false),
            (0, true, false),
            (0, false, false),
            (10_000, false, true),
            (300, false, true),
        ] {
            let key = format!("http://x/plan/{len}/{held}");
            let h = key_hash(&key);
            let mut t = TempObject::create(&l, h, meta(&key, len), "t", 0).unwrap();
            let body: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
            let mut parts = Vec::new();
            for c in body.chunks(4000) {
                if streamed {
                    t.write(c).unwrap();
                } else {
                    t.record(c);
                    parts.push(Bytes::copy_from_slice(c));
                }
            }
            let plan = t.prepare_commit(&mut parts).unwrap();
            assert!(parts.is_empty(), "held parts taken");
            let held_parts = if streamed {
                0
            } else {
                body.len().div_ceil(4000)
            };
            assert_eq!(plan.body_parts, held_parts);
            let written: Vec<u8> = plan.parts.concat();
            let header_len = PREFIX_LEN + t.meta().encoded_len();
            let offset = t.body_offset() as usize;
            if streamed {
                assert_eq!(written.len(), header_len, "{key}: the header alone");
            } else {
                assert_eq!(written.len(), offset + body.len(), "{key}");
                assert!(written[header_len..offset].iter().all(|&b| b == 0));
                assert_eq!(&written[offset..], &body[..]);
            }
            let padded = encode_header(h, t.meta(), Some(offset as u64)).unwrap();
            assert_eq!(written[..header_len], padded[..header_len]);
            let file = t.reader().unwrap();
            edge_aio::write_all_vectored_at(&*file, 0, &plan.parts).unwrap();
            let size = file.metadata().unwrap().len();
            assert_eq!(size, (offset + body.len()) as u64, "{key}: file length");
            let hdr = read_header(&file, h).unwrap();
            assert_eq!(hdr.body_offset, offset as u64);
            assert_eq!(read_body(&file, hdr.body_offset, len).unwrap(), body);
        }
    }

    #[test]
    fn a_small_object_is_packed_in_one_block_and_a_large_one_aligned() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        for (len, packed) in [
            (0usize, true),
            (512, true),
            (3000, true),
            (3900, false),
            (10_000, false),
        ] {
            let body: Vec<u8> = (0..len as u32).map(|i| (i * 13) as u8).collect();
            let key = format!("http://x/{len}");
            let c = write_obj(&l, &key, &body);
            let path = l.path_for(c.hash);
            let size = fs::metadata(&path).unwrap().len();
            assert_eq!(size, c.body_offset + len as u64);
            if packed {
                assert!(size <= BODY_ALIGN, "{len}: {size} bytes");
                assert_ne!(c.body_offset % BODY_ALIGN, 0, "{len}");
                assert_eq!(c.disk_size, BODY_ALIGN, "{len}");
            } else {
                assert_eq!(c.body_offset % BODY_ALIGN, 0, "{len}");
            }
            let f = File::open(&path).unwrap();
            let h = read_header(&f, c.hash).unwrap();
            assert_eq!(h.body_offset, c.body_offset);
            assert_eq!(read_body(&f, h.body_offset, h.meta.body_len).unwrap(), body);
            // A 304 whose headers still fit in the slack is rewritten in place; one that
            // grew past it is refused, and the caller rewrites the whole file.
            let mut m = h.meta.clone();
            m.header_block.extend_from_slice(b"X-A: b\r\n");
            rewrite_header_in_place(&path, c.hash, &m, c.body_offset, c.ino).unwrap();
            assert_eq!(
                read_header(&f, c.hash).unwrap().meta.header_block,
                m.header_block
            );
            m.header_block
                .extend(std::iter::repeat_n(b'x', 2 * HEADER_SLACK));
            let grew = rewrite_header_in_place(&path, c.hash, &m, c.body_offset, c.ino);
            assert!(
                matches!(grew, Err(RewriteError::NoRoom)) || !packed,
                "{len}"
            );
        }
        // An unaligned offset whose object does not fit in a block is not one the writer
        // makes: refused.
        assert!(!valid_body_offset(1000, 3500));
        assert!(valid_body_offset(1000, 3000));
        assert!(valid_body_offset(8192, 1 << 20));
    }

    #[test]
    fn dropped_writer_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let h = key_hash("k");
        let mut t = TempObject::create(&l, h, meta("k", 100), "t", 0).unwrap();
        t.write(&[1; 50]).unwrap();
        drop(t);
        assert!(!l.path_for(h).exists());
        assert_eq!(fs::read_dir(l.dir_for(h)).unwrap().count(), 0);
    }

    #[test]
    fn short_body_is_not_committed() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let h = key_hash("k");
        let mut t = TempObject::create(&l, h, meta("k", 100), "t", 0).unwrap();
        t.write(&[1; 99]).unwrap();
        assert!(t.commit().is_err());
        assert!(!l.path_for(h).exists());
        assert_eq!(fs::read_dir(l.dir_for(h)).unwrap().count(), 0);
    }

    #[test]
    fn unknown_length_takes_the_written_length() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let h = key_hash("k");
        let mut t = TempObject::create(&l, h, meta("k", BODY_LEN_UNKNOWN), "t", 0).unwrap();
        t.write(b"hello").unwrap();
        let c = t.commit().unwrap();
        assert_eq!(c.meta.body_len, 5);
        let f = File::open(l.path_for(h)).unwrap();
        assert_eq!(read_header(&f, h).unwrap().meta.body_len, 5);
    }

    #[test]
    fn every_header_byte_flip_is_detected() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let c = write_obj(&l, "http://x/flip", b"body bytes");
        let path = l.path_for(c.hash);
        let orig = read_all(&path);
        let header_end = PREFIX_LEN + {
            let mut v = Vec::new();
            c.meta.encode(&mut v);
            v.len()
        };
        for i in 0..header_end {
            let mut bad = orig.clone();
            bad[i] ^= 0x20;
            fs::write(&path, &bad).unwrap();
            let f = File::open(&path).unwrap();
            assert!(
                read_header(&f, c.hash).is_err(),
                "flip at byte {i} not detected"
            );
        }
    }

    #[test]
    fn cut_body_and_wrong_name_are_detected() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let c = write_obj(&l, "http://x/cut", &[9u8; 5000]);
        let path = l.path_for(c.hash);
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(c.body_offset + 4999).unwrap();
        let f = File::open(&path).unwrap();
        assert!(matches!(
            read_header(&f, c.hash),
            Err(StorageError::BadSize { .. })
        ));
        assert!(matches!(
            read_header(&f, c.hash ^ 1),
            Err(StorageError::WrongKey)
        ));
    }

    /// A version-1 file (its header block without `Date`) is still served: the loader
    /// reads it and puts a `Date` line, from the stored date, first in the block.
    #[test]
    fn version_1_files_are_read_and_get_a_date_line() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let c = write_obj(&l, "http://x/v1", b"body");
        let path = l.path_for(c.hash);
        downgrade(&path, 1);
        let h = read_header(&File::open(&path).unwrap(), c.hash).unwrap();
        let block = String::from_utf8(h.meta.header_block.clone()).unwrap();
        assert!(block.starts_with("Date: "), "{block}");
        assert!(block.ends_with("Content-Type: text/plain\r\n"), "{block}");
        assert_eq!(block.matches("Date: ").count(), 1);
    }

    /// Rewrites a file as format `version` (1 or 2) would have: the meta without the
    /// trailing body id, the body where it was.
    fn downgrade(path: &Path, version: u32) {
        let mut b = read_all(path);
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let meta_len = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
        let id_at = PREFIX_LEN + meta_len - 8;
        b.drain(id_at..id_at + 8);
        b.splice(id_at..id_at, [0u8; 8]); // padding: the body keeps its offset
        let meta_len = meta_len - 8;
        b[12..16].copy_from_slice(&(meta_len as u32).to_le_bytes());
        let sum = header_checksum(&b[..56], &b[PREFIX_LEN..PREFIX_LEN + meta_len]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        fs::write(path, &b).unwrap();
    }

    /// A version-2 file has no body id: it reads as 0, and the body checksum stands in.
    #[test]
    fn version_2_files_are_read_without_a_body_id() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let c = write_obj(&l, "http://x/v2", b"body two");
        let path = l.path_for(c.hash);
        downgrade(&path, 2);
        let h = read_header(&File::open(&path).unwrap(), c.hash).unwrap();
        assert_eq!(h.meta.body_id, 0);
        assert_eq!(h.meta.body_id(), h.meta.body_hash);
        assert_eq!(h.meta.key, "http://x/v2");
    }

    #[test]
    fn old_version_is_reported() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let c = write_obj(&l, "http://x/v", b"x");
        let path = l.path_for(c.hash);
        let mut b = read_all(&path);
        b[8..12].copy_from_slice(&0u32.to_le_bytes());
        fs::write(&path, &b).unwrap();
        let f = File::open(&path).unwrap();
        assert!(matches!(
            read_header(&f, c.hash),
            Err(StorageError::OldVersion(0))
        ));
    }

    #[test]
    fn header_rewrite_in_place_keeps_body() {
        let d = tempfile::tempdir().unwrap();
        let l = layout(d.path());
        let c = write_obj(&l, "http://x/r", b"the body");
        let path = l.path_for(c.hash);
        let mut m = c.meta.clone();
        m.header_block.extend_from_slice(b"X-New: 1\r\n");
        m.soft_purged = true;
        rewrite_header_in_place(&path, c.hash, &m, c.body_offset, c.ino).unwrap();
        let f = File::open(&path).unwrap();
        let h = read_header(&f, c.hash).unwrap();
        assert_eq!(h.meta, m);
        assert_eq!(read_body(&f, h.body_offset, 8).unwrap(), b"the body");
        // A header that does not fit is refused, and the whole-file rewrite works.
        m.header_block = vec![b'a'; 10_000];
        assert!(matches!(
            rewrite_header_in_place(&path, c.hash, &m, c.body_offset, c.ino),
            Err(RewriteError::NoRoom)
        ));
        let c2 = rewrite_whole(&l, c.hash, m.clone(), &f, c.body_offset, "t", 1).unwrap();
        let f2 = File::open(&path).unwrap();
        let h2 = read_header(&f2, c.hash).unwrap();
        assert_eq!(h2.meta.header_block.len(), 10_000);
        assert_eq!(read_body(&f2, c2.body_offset, 8).unwrap(), b"the body");
    }

    #[test]
    fn write_errors_are_rate_limited() {
        let w = WriteErrors::default();
        let e = io::Error::other("disk full");
        assert!(w.record("write", &e));
        assert!(!w.record("write", &e));
        assert_eq!(w.count(), 2);
        assert_eq!(w.last().unwrap(), "write: disk full");
    }
}
