//! `{{name}}` / `{{name|default}}` substitution for the peer config templates.
//!
//! How it fits: `bench/peers/` holds one template per server kind (nginx.conf,
//! varnish.vcl, edgecache.toml, the ATS files). The runner supplies the standard
//! variables (port, origin, run dir) and the experiment file adds its own (`vars`), so a
//! variant such as "nginx + aio threads" is data. An unknown placeholder without a
//! default is an error that names the template and the variable, never a silent blank.

use std::collections::BTreeMap;

/// Longest placeholder name accepted, so a stray `{{` cannot swallow the file.
const MAX_NAME: usize = 64;

/// Renders `text`; `what` names the template in errors.
pub fn render(what: &str, text: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len() + 256);
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| {
            format!(
                "{what}: unclosed '{{{{' at byte {}",
                text.len() - rest.len() + start
            )
        })?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once('|') {
            Some((n, d)) => (n.trim(), Some(d)),
            None => (inner.trim(), None),
        };
        if name.is_empty()
            || name.len() > MAX_NAME
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(format!("{what}: bad placeholder {{{{{inner}}}}}"));
        }
        match (vars.get(name), default) {
            (Some(v), _) => out.push_str(v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!(
                    "{what}: no value for {{{{{name}}}}} (set it in the experiment's `vars`)"
                ))
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn substitutes_and_defaults() {
        let v = vars(&[("port", "8080"), ("extra", "aio threads;")]);
        let t = "listen {{port}};\n{{ extra }}\nworkers {{workers|1}};{{none|}}";
        assert_eq!(
            render("t", t, &v).unwrap(),
            "listen 8080;\naio threads;\nworkers 1;"
        );
    }

    #[test]
    fn given_value_beats_default() {
        let v = vars(&[("workers", "4")]);
        assert_eq!(render("t", "{{workers|1}}", &v).unwrap(), "4");
    }

    #[test]
    fn errors_name_the_problem() {
        let v = vars(&[]);
        assert!(render("nginx.conf", "{{port}}", &v)
            .unwrap_err()
            .contains("nginx.conf: no value for {{port}}"));
        assert!(render("t", "a {{port", &v)
            .unwrap_err()
            .contains("unclosed"));
        assert!(render("t", "{{a b}}", &v)
            .unwrap_err()
            .contains("bad placeholder"));
        assert!(render("t", "{{}}", &v)
            .unwrap_err()
            .contains("bad placeholder"));
    }

    #[test]
    fn text_without_placeholders_is_unchanged() {
        let t = "server { location / { } }\n$upstream_cache_status {single}";
        assert_eq!(render("t", t, &vars(&[])).unwrap(), t);
    }
}
