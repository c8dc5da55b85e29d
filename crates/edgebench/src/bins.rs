//! Finding the programs the runner starts: our own binaries and the peers.
//!
//! How it fits: by default edgebench uses the `edgecache`, `edgeorigin` and `edgeload`
//! that sit next to its own executable (`target/release/` after `cargo build --release`),
//! so one build gives a consistent set. `--bin-dir DIR` or `EDGEBENCH_BIN_DIR` points
//! elsewhere, and `EDGEBENCH_<NAME>` (e.g. `EDGEBENCH_EDGECACHE`, `EDGEBENCH_NGINX`)
//! overrides one program. Peers are looked up on `PATH` plus the sbin directories, where
//! Debian installs nginx and varnishd.

use std::path::{Path, PathBuf};

/// Searched after `PATH` (root's PATH has them; a user's often does not).
const EXTRA_DIRS: [&str; 4] = ["/usr/sbin", "/usr/local/sbin", "/usr/bin", "/sbin"];

/// Where our own binaries live.
#[derive(Debug, Clone)]
pub struct Bins {
    pub dir: PathBuf,
}

fn env_name(program: &str) -> String {
    format!(
        "EDGEBENCH_{}",
        program.to_ascii_uppercase().replace('-', "_")
    )
}

impl Bins {
    /// `--bin-dir`, else `EDGEBENCH_BIN_DIR`, else the directory of this executable.
    pub fn new(flag: Option<PathBuf>) -> Bins {
        let dir = flag
            .or_else(|| std::env::var_os("EDGEBENCH_BIN_DIR").map(PathBuf::from))
            .or_else(|| {
                std::env::current_exe()
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf))
            })
            .unwrap_or_else(|| PathBuf::from("."));
        Bins { dir }
    }

    /// One of our binaries: `EDGEBENCH_<NAME>` or `<dir>/<name>`; Err says what is missing.
    pub fn ours(&self, name: &str) -> Result<PathBuf, String> {
        if let Some(p) = std::env::var_os(env_name(name)) {
            let p = PathBuf::from(p);
            return if is_executable(&p) {
                Ok(p)
            } else {
                Err(format!(
                    "{} = {} is not an executable file",
                    env_name(name),
                    p.display()
                ))
            };
        }
        let p = self.dir.join(name);
        if is_executable(&p) {
            Ok(p)
        } else {
            Err(format!(
                "{} not found (build it: cargo build --release -p {name}; or pass --bin-dir / set {})",
                p.display(),
                env_name(name)
            ))
        }
    }
}

/// A system program: `EDGEBENCH_<NAME>`, else `PATH` and the sbin directories.
pub fn system(name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env_name(name)) {
        let p = PathBuf::from(p);
        return is_executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_system_programs_and_reports_missing_ones() {
        assert!(system("sh").is_some());
        assert!(system("definitely-not-a-program-xyz").is_none());
    }

    #[test]
    fn our_binaries_come_from_the_bin_dir() {
        let dir = tempfile::tempdir().unwrap();
        let b = Bins::new(Some(dir.path().to_path_buf()));
        let e = b.ours("edgebench-test-nothing").unwrap_err();
        assert!(
            e.contains("cargo build --release -p edgebench-test-nothing"),
            "{e}"
        );
        let p = dir.path().join("edgebench-test-tool");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(b.ours("edgebench-test-tool").unwrap(), p);
    }
}
