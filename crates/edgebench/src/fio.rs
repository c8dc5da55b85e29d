//! The disk's ceiling: one `fio` random-read run per workload, for experiments with a
//! `[fio]` section (cold-cache experiments compare servers with what the disk can give).
//!
//! How it fits: the runner calls [`run`] once per workload, after the cache fill and
//! after dropping the page cache, with the workload's object size as the block size and
//! its connections as the queue depth, against one file laid out in the run directory
//! (the same filesystem as every server's cache). Its MB/s is the "disk ceiling" line of
//! the workload's report section. fio not installed is a note, not an error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::cpus::CpuSet;
use crate::error::{Error, Result};
use crate::experiment::FioPlan;
use crate::process::{SpawnSpec, Spawned};

/// Time fio may take beyond its run time (laying out the file, start-up).
const SLACK: Duration = Duration::from_secs(120);

/// What one fio run measured.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct FioResult {
    pub workload: String,
    pub bs: u64,
    pub iodepth: u32,
    pub ioengine: String,
    pub direct: bool,
    pub runtime_s: f64,
    pub mb_per_s: f64,
    pub iops: f64,
    /// Completion latency percentiles (µs), when fio reported them.
    pub clat_p50_us: Option<f64>,
    pub clat_p99_us: Option<f64>,
}

/// One run's shape.
#[derive(Debug, Clone)]
pub struct FioJob<'a> {
    pub plan: &'a FioPlan,
    pub file: &'a Path,
    pub bs: u64,
    pub iodepth: u32,
    pub runtime: Duration,
}

/// The command line (fio's own flags, JSON output on stdout).
pub fn args(job: &FioJob, engine: &str) -> Vec<String> {
    vec![
        "--name=ceiling".into(),
        format!("--filename={}", job.file.display()),
        "--rw=randread".into(),
        format!("--bs={}", job.bs),
        format!("--iodepth={}", job.iodepth.max(1)),
        format!("--ioengine={engine}"),
        format!("--direct={}", u8::from(job.plan.direct)),
        format!("--size={}", job.plan.size),
        format!("--runtime={}", job.runtime.as_secs().max(1)),
        "--time_based".into(),
        "--group_reporting".into(),
        "--output-format=json".into(),
    ]
}

/// Reads bandwidth, IOPS and completion latency from fio's `--output-format=json`
/// (text before the JSON object, such as layout notices, is skipped).
pub fn parse(text: &str) -> std::result::Result<(f64, f64, Option<f64>, Option<f64>), String> {
    let start = text.find('{').ok_or("fio printed no JSON")?;
    let v: serde_json::Value = serde_json::Deserializer::from_str(&text[start..])
        .into_iter::<serde_json::Value>()
        .next()
        .ok_or("fio printed no JSON")?
        .map_err(|e| format!("bad fio JSON: {e}"))?;
    let read = v
        .get("jobs")
        .and_then(|j| j.get(0))
        .and_then(|j| j.get("read"))
        .ok_or("fio JSON has no jobs[0].read")?;
    let bw = read
        .get("bw_bytes")
        .and_then(|x| x.as_f64())
        .ok_or("fio JSON has no read.bw_bytes")?;
    let iops = read.get("iops").and_then(|x| x.as_f64()).unwrap_or(0.0);
    let pct = |p: &str| {
        read.get("clat_ns")?
            .get("percentile")?
            .get(p)?
            .as_f64()
            .map(|ns| ns / 1e3)
    };
    Ok((bw / 1e6, iops, pct("50.000000"), pct("99.000000")))
}

/// Runs fio once in `dir` (log `fio-<tag>.log` there); falls back from io_uring to
/// libaio when the first engine fails. `Err` carries a note for the report.
#[allow(clippy::too_many_arguments)]
pub fn run(
    program: &Path,
    job: &FioJob,
    workload: &str,
    dir: &Path,
    tag: &str,
    cpus: Option<CpuSet>,
) -> Result<FioResult> {
    let mut engines = vec![job.plan.ioengine.clone()];
    if job.plan.ioengine == "io_uring" {
        engines.push("libaio".into());
    }
    let mut last = String::new();
    for engine in engines {
        let mut p = Spawned::spawn(&SpawnSpec {
            name: format!("fio-{tag}-{engine}"),
            program: program.to_path_buf(),
            args: args(job, &engine),
            dir: dir.to_path_buf(),
            cpus: cpus.clone(),
            env: vec![],
            cgroup: None,
        })?;
        let st = p.wait(job.runtime + SLACK)?;
        let out = std::fs::read_to_string(p.log_path()).unwrap_or_default();
        if !st.success() {
            last = format!("fio ({engine}) failed ({st}): {}", p.log_tail().trim());
            continue;
        }
        match parse(&out) {
            Ok((mb_per_s, iops, p50, p99)) => {
                return Ok(FioResult {
                    workload: workload.to_string(),
                    bs: job.bs,
                    iodepth: job.iodepth,
                    ioengine: engine,
                    direct: job.plan.direct,
                    runtime_s: job.runtime.as_secs_f64(),
                    mb_per_s,
                    iops,
                    clat_p50_us: p50,
                    clat_p99_us: p99,
                })
            }
            Err(e) => last = format!("fio ({engine}): {e}"),
        }
    }
    Err(Error::runtime(last))
}

/// The file fio reads: one per run directory, reused by every workload.
pub fn file_in(dir: &Path) -> PathBuf {
    dir.join("fio-ceiling.dat")
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"ceiling: Laying out IO file (1 file / 1024MiB)
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "ceiling",
      "read" : {
        "io_bytes" : 13180000000,
        "bw_bytes" : 1318351709,
        "iops" : 5029.11,
        "clat_ns" : {
          "mean" : 12694335.5,
          "percentile" : { "50.000000" : 12000000, "99.000000" : 25000000 }
        }
      }
    }
  ]
}
"#;

    #[test]
    fn parses_fio_json_after_layout_notices() {
        let (mb, iops, p50, p99) = parse(JSON).unwrap();
        assert!((mb - 1318.35).abs() < 0.01, "{mb}");
        assert_eq!(iops, 5029.11);
        assert_eq!(p50, Some(12000.0));
        assert_eq!(p99, Some(25000.0));
        assert!(parse("fio: engine io_uring not loadable").is_err());
        assert!(parse(r#"{"jobs": []}"#).unwrap_err().contains("jobs[0]"));
    }

    #[test]
    fn arguments_follow_the_workload() {
        let plan = FioPlan {
            ioengine: "io_uring".into(),
            size: 1 << 30,
            direct: true,
            runtime: None,
        };
        let job = FioJob {
            plan: &plan,
            file: Path::new("/run/x/fio-ceiling.dat"),
            bs: 256 << 10,
            iodepth: 64,
            runtime: Duration::from_secs(10),
        };
        let a = args(&job, "libaio").join(" ");
        for needle in [
            "--rw=randread",
            "--bs=262144",
            "--iodepth=64",
            "--ioengine=libaio",
            "--direct=1",
            "--size=1073741824",
            "--runtime=10",
            "--time_based",
            "--output-format=json",
            "--filename=/run/x/fio-ceiling.dat",
        ] {
            assert!(a.contains(needle), "{needle} in {a}");
        }
    }
}
