//! The machine description at the top of every report: CPU model, cores, kernel,
//! memory, disks, and the date, so a reader knows what the numbers were measured on.
//!
//! How it fits: read once per run from `/proc` and `/sys` (no external commands), and
//! written into the report and the raw JSON.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    pub online_cpus: usize,
    pub allowed_cpus: Vec<usize>,
    pub kernel: String,
    pub memory_gib: f64,
    pub disks: Vec<String>,
    pub root_fs: String,
    pub hostname: String,
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .trim()
        .to_string()
}

impl Machine {
    pub fn describe() -> Machine {
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let online_cpus = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        let mem_kb: f64 = read("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let kernel = format!(
            "{} {}",
            read("/proc/sys/kernel/ostype"),
            read("/proc/sys/kernel/osrelease")
        );
        Machine {
            cpu_model,
            online_cpus,
            allowed_cpus: crate::cpus::allowed(),
            kernel,
            memory_gib: (mem_kb / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            disks: disks(),
            root_fs: root_fs(),
            hostname: read("/proc/sys/kernel/hostname"),
        }
    }
}

/// Block devices (not loop/ram/zram): name, size, rotational or not, model.
fn disks() -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return out;
    };
    let mut names: Vec<String> = rd
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for n in names {
        if ["loop", "ram", "zram", "dm-", "sr"]
            .iter()
            .any(|p| n.starts_with(p))
        {
            continue;
        }
        let sectors: f64 = read(&format!("/sys/block/{n}/size")).parse().unwrap_or(0.0);
        let rot = match read(&format!("/sys/block/{n}/queue/rotational")).as_str() {
            "0" => "SSD/virtual",
            "1" => "rotational",
            _ => "unknown",
        };
        let model = read(&format!("/sys/block/{n}/device/model"));
        let gb = sectors * 512.0 / 1e9;
        let mut s = format!("{n} {gb:.0} GB {rot}");
        if !model.is_empty() {
            s.push_str(&format!(" ({model})"));
        }
        out.push(s);
    }
    out
}

/// "device fstype" of the filesystem mounted on `/`.
fn root_fs() -> String {
    read("/proc/mounts")
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .rfind(|f| f.len() >= 3 && f[1] == "/")
        .map(|f| format!("{} ({})", f[0], f[2]))
        .unwrap_or_else(|| "unknown".into())
}

/// `YYYY-MM-DD HH:MM:SS UTC` for a Unix time (civil-from-days, no time zone database).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Now, as [`utc`].
pub fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    utc(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn describes_this_machine() {
        let m = Machine::describe();
        assert!(m.online_cpus >= 1);
        assert!(m.memory_gib > 0.0);
        assert!(m.kernel.contains("Linux"), "{}", m.kernel);
    }
}
