//! URL groups expanded into the (path, weight) pairs the fill, the probe and the
//! warm-up request (bounded by [`MAX_PATHS`]), and the shapes edgeload draws from
//! itself: an `{id}` range ([`id_range`]) and a Zipf law ([`zipf_of`]).

use super::spec::{Expect, UrlGroup};
use super::{MAX_PATHS, MAX_ZIPF};

/// A workload's paths for the fill and the probe: every one ([`expand_paths`]), or with
/// `expect = "miss"` one per group with id 0 (the load generator draws the ids itself,
/// from 1).
pub(super) fn workload_paths(
    groups: &[UrlGroup],
    expect: Expect,
) -> std::result::Result<Vec<(String, u32)>, String> {
    if expect != Expect::Miss {
        return expand_paths(groups);
    }
    if id_range(groups).is_none() {
        return Err(
            "with expect = \"miss\" every URL group must end in \"/{id}\" with the \
                    same `ids` (edgeload draws the ids)"
                .into(),
        );
    }
    let zero: Vec<UrlGroup> = groups
        .iter()
        .map(|g| UrlGroup {
            ids: None,
            path: g.path.replace("{id}", "0"),
            ..g.clone()
        })
        .collect();
    expand_paths(&zero)
}

/// Expands `{id}` templates into concrete (path, weight) pairs, bounded by [`MAX_PATHS`].
pub(super) fn expand_paths(groups: &[UrlGroup]) -> std::result::Result<Vec<(String, u32)>, String> {
    if groups.is_empty() {
        return Err("needs at least one [[workload.urls]] entry".into());
    }
    let mut out = Vec::new();
    for g in groups {
        if !g.path.starts_with('/')
            || g.path
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(format!(
                "path {:?} must start with '/' and have no spaces",
                g.path
            ));
        }
        if g.weight == 0 {
            return Err(format!("path {:?}: weight must be at least 1", g.path));
        }
        match (g.path.contains("{id}"), g.ids) {
            (true, Some(n)) if n > 0 => {
                if out.len() + n as usize > MAX_PATHS {
                    return Err(format!("more than {MAX_PATHS} paths"));
                }
                for id in 1..=n {
                    out.push((g.path.replace("{id}", &id.to_string()), g.weight));
                }
            }
            (true, _) => {
                return Err(format!(
                    "path {:?} has {{id}} but no `ids = N` (N >= 1)",
                    g.path
                ))
            }
            (false, Some(_)) => {
                return Err(format!(
                    "path {:?} has `ids` but no {{id}} placeholder",
                    g.path
                ))
            }
            (false, None) => out.push((g.path.clone(), g.weight)),
        }
    }
    Ok(out)
}

/// `Some(ids)` when every group ends in `/{id}` (its only placeholder) with the same
/// `ids`: the shape edgeload draws itself (`--paths ids`, the prefixes in a `--mix`).
pub fn id_range(groups: &[UrlGroup]) -> Option<u32> {
    let ids = groups.first().and_then(|g| g.ids)?;
    groups
        .iter()
        .all(|g| {
            g.ids == Some(ids) && g.path.ends_with("/{id}") && g.path.matches("{id}").count() == 1
        })
        .then_some(ids)
}

/// The workload's Zipf exponent (None: no group sets `zipf`, ids are uniform). edgeload
/// draws the id itself, one law for every mix line, so `zipf` needs every group in the
/// [`id_range`] shape and the same `zipf` on each; anything else is refused here rather
/// than silently run uniform.
pub fn zipf_of(groups: &[UrlGroup]) -> std::result::Result<Option<f64>, String> {
    let Some(first) = groups.iter().find_map(|g| g.zipf) else {
        return Ok(None);
    };
    for g in groups {
        if let Some(a) = g.zipf {
            if !(a.is_finite() && a > 0.0 && a <= MAX_ZIPF) {
                return Err(format!(
                    "path {:?}: zipf = {a} must be in (0, {MAX_ZIPF}]",
                    g.path
                ));
            }
        }
    }
    if id_range(groups).is_none() {
        return Err(format!(
            "zipf needs every URL group of the workload to end in \"/{{id}}\" with the same `ids` \
             (edgeload draws the id itself over 1..=ids); here: {}",
            groups
                .iter()
                .map(|g| match g.ids {
                    Some(n) => format!("{:?} ids {n}", g.path),
                    None => format!("{:?} no ids", g.path),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(g) = groups.iter().find(|g| g.zipf != Some(first)) {
        return Err(format!(
            "zipf must be the same on every URL group of the workload (edgeload draws one \
             law for all of them): {:?} has {}, not {first}",
            g.path,
            g.zipf.map_or("none".to_string(), |a| a.to_string())
        ));
    }
    Ok(Some(first))
}
