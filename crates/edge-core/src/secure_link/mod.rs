//! Signed URLs (`secure_link`, `docs/limits.md`): the verifier a location runs on each
//! request, and the signing that `edgecache sign` does with the same code.
//!
//! The contract (DESIGN.md, "Limits and access"): a signature is the lowercase hex
//! HMAC-SHA256, keyed by a secret file's bytes (trailing newline stripped), of the
//! `include` values and then the expiry in Unix seconds, joined by `\n`. A request
//! without valid arguments, or with a signature no secret made, gets 403; a valid
//! signature whose expiry has passed gets 410.
//!
//! What is signed: the `include` templates rendered for the request as the location
//! sees it (after rewrites), except that `$args`, `$is_args`, `$arg_NAME` and
//! `$request_uri` see the query without the expiry and signature arguments (a signature
//! cannot cover itself; with them a link can cover its whole query). `$uri` is nginx's
//! normalized path, so `/a%2Db` and `/a-b` are one signed path.
//!
//! The arguments are read strictly from the query: each exactly once, names compared
//! as written (case-sensitive, not decoded); the signature is 64 hex digits; the expiry
//! is a decimal `u64` without a sign or leading zeros. Anything else is 403.
//!
//! Cost: one rendering of the `include` templates into a buffer and one HMAC-SHA256
//! per secret tried (the first secret that verifies stops the search), compared in
//! constant time by `ring::hmac::verify`.

pub mod sign;

use crate::vars::{Ctx, Template};
use edge_http::normalize::{hex_digit, ArgPattern, ArgsPolicy};
use ring::hmac;
use std::borrow::Cow;

/// Bytes of an HMAC-SHA256 signature.
pub const SIG_LEN: usize = 32;

/// What a request's signed-URL check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The signature is valid and the link has not expired: the request proceeds.
    Valid,
    /// Missing or malformed arguments, or a signature no secret made: 403.
    Forbidden,
    /// A valid signature whose expiry has passed: 410.
    Gone,
}

impl Verdict {
    /// The status to answer with; None when the request proceeds.
    pub fn status(self) -> Option<u16> {
        match self {
            Verdict::Valid => None,
            Verdict::Forbidden => Some(403),
            Verdict::Gone => Some(410),
        }
    }
}

/// Why the arguments of a query were refused (each is a 403).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgsError {
    /// No expiry or no signature argument.
    Missing,
    /// One of them appears more than once.
    Repeated,
    /// The signature is not 64 hex digits.
    BadSignature,
    /// The expiry is not a decimal `u64` (no sign, no leading zeros).
    BadExpiry,
}

/// The expiry and signature a query carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkArgs {
    pub expires: u64,
    pub sig: [u8; SIG_LEN],
}

/// Reads the expiry argument `expires_arg` and the signature argument `signature_arg`
/// from a query (without `?`), strictly (see the module docs).
pub fn parse_args(
    query: Option<&str>,
    expires_arg: &str,
    signature_arg: &str,
) -> Result<LinkArgs, ArgsError> {
    let (mut expires, mut sig) = (None, None);
    for piece in query.unwrap_or("").split('&') {
        let (name, value) = piece.split_once('=').unwrap_or((piece, ""));
        let slot = if name == expires_arg {
            &mut expires
        } else if name == signature_arg {
            &mut sig
        } else {
            continue;
        };
        if slot.replace(value).is_some() {
            return Err(ArgsError::Repeated);
        }
    }
    let (Some(expires), Some(sig)) = (expires, sig) else {
        return Err(ArgsError::Missing);
    };
    Ok(LinkArgs {
        expires: parse_expiry(expires).ok_or(ArgsError::BadExpiry)?,
        sig: decode_sig(sig).ok_or(ArgsError::BadSignature)?,
    })
}

/// A decimal `u64` as a signer writes it: digits only, no leading zero (but `0`).
fn parse_expiry(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let canonical = !b.is_empty()
        && b.len() <= 20
        && b.iter().all(u8::is_ascii_digit)
        && (b[0] != b'0' || b.len() == 1);
    if !canonical {
        return None;
    }
    s.parse().ok()
}

/// 64 hex digits (either case) as 32 bytes.
fn decode_sig(s: &str) -> Option<[u8; SIG_LEN]> {
    let b = s.as_bytes();
    if b.len() != 2 * SIG_LEN {
        return None;
    }
    let mut out = [0u8; SIG_LEN];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        *o = hex_digit(pair[0])? << 4 | hex_digit(pair[1])?;
    }
    Some(out)
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

/// `query` without the arguments named `a` or `b` (the other pieces kept as they are,
/// in order). Borrowed when there are none.
pub fn strip_args<'q>(query: &'q str, a: &str, b: &str) -> Cow<'q, str> {
    let ours = |piece: &str| {
        let name = piece.split_once('=').map_or(piece, |(n, _)| n);
        name == a || name == b
    };
    if !query.split('&').any(ours) {
        return Cow::Borrowed(query);
    }
    let mut out = String::with_capacity(query.len());
    for (i, piece) in query.split('&').filter(|p| !ours(p)).enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(piece);
    }
    Cow::Owned(out)
}

/// A location's compiled `secure_link`.
pub struct Verifier {
    /// One key per secret file, in config order (the first one signs).
    keys: Vec<hmac::Key>,
    expires_arg: Box<str>,
    signature_arg: Box<str>,
    include: Vec<Template>,
}

impl Verifier {
    /// A verifier over `secrets` (each a key's bytes), reading the named arguments and
    /// signing the `include` templates.
    pub fn new<S: AsRef<[u8]>>(
        secrets: &[S],
        expires_arg: &str,
        signature_arg: &str,
        include: Vec<Template>,
    ) -> Verifier {
        Verifier {
            keys: secrets
                .iter()
                .map(|s| hmac::Key::new(hmac::HMAC_SHA256, s.as_ref()))
                .collect(),
            expires_arg: expires_arg.into(),
            signature_arg: signature_arg.into(),
            include,
        }
    }

    pub fn expires_arg(&self) -> &str {
        &self.expires_arg
    }

    pub fn signature_arg(&self) -> &str {
        &self.signature_arg
    }

    /// The bytes a signature covers for the request in `ctx`, expiring at `expires`:
    /// the `include` values, then the expiry, joined by `\n`. The templates see the
    /// query (`$args`, `$is_args`, `$arg_NAME`, `$request_uri`) without the expiry and
    /// signature arguments.
    pub fn message(&self, ctx: &Ctx<'_>, expires: u64) -> Vec<u8> {
        let (a, b) = (&*self.expires_arg, &*self.signature_arg);
        let args = ctx.args.map(|q| strip_args(q, a, b));
        let request_uri: Cow<'_, str> = match ctx.request_uri.split_once('?') {
            Some((p, q)) => match strip_args(q, a, b) {
                Cow::Borrowed(_) => Cow::Borrowed(ctx.request_uri),
                Cow::Owned(q) if q.is_empty() => Cow::Borrowed(p),
                Cow::Owned(q) => Cow::Owned(format!("{p}?{q}")),
            },
            None => Cow::Borrowed(ctx.request_uri),
        };
        let mut c = *ctx;
        c.args = args.as_deref().filter(|q| !q.is_empty());
        c.request_uri = &request_uri;
        let mut msg = Vec::with_capacity(64 + c.uri.len());
        for (i, t) in self.include.iter().enumerate() {
            if i > 0 {
                msg.push(b'\n');
            }
            t.render(&c, &mut msg);
        }
        msg.push(b'\n');
        msg.extend_from_slice(expires.to_string().as_bytes());
        msg
    }

    /// The lowercase hex signature of `message` under the first secret.
    pub fn sign(&self, message: &[u8]) -> String {
        match self.keys.first() {
            Some(k) => hex(hmac::sign(k, message).as_ref()),
            None => String::new(),
        }
    }

    /// Checks the request in `ctx` at `now` (Unix seconds).
    pub fn verify(&self, ctx: &Ctx<'_>, now: u64) -> Verdict {
        let Ok(link) = parse_args(ctx.args, &self.expires_arg, &self.signature_arg) else {
            return Verdict::Forbidden;
        };
        let msg = self.message(ctx, link.expires);
        // Every secret may have made it (rotation); each comparison is constant-time.
        if !self
            .keys
            .iter()
            .any(|k| hmac::verify(k, &msg, &link.sig).is_ok())
        {
            return Verdict::Forbidden;
        }
        if link.expires < now {
            return Verdict::Gone;
        }
        Verdict::Valid
    }

    /// The cache key's argument policy for this location: `policy` (its
    /// `cache_key_args`; None: every argument, in order) less the expiry and signature
    /// arguments, so that every signature of one object is one cache object.
    pub fn key_args(&self, policy: Option<ArgsPolicy>) -> ArgsPolicy {
        let mut p = policy.unwrap_or_default();
        for name in [&*self.expires_arg, &*self.signature_arg] {
            p.exclude.push(ArgPattern::Exact(name.into()));
        }
        p
    }
}

/// The current time in Unix seconds (0 before 1970).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
