//! A small SVG writer for the report's plots: grouped bars with min–max whiskers, and
//! percentile lines on a log scale, both as "small multiples" (one panel per workload,
//! each with its own y scale, so 1 KiB and 1 MiB results are both readable).
//!
//! How it fits: [`crate::report`] builds [`BarPanel`]s / [`LinePanel`]s from the results
//! and writes the strings this module returns next to the Markdown file. No dependency:
//! the output is plain SVG 1.1 text with escaped labels, viewable in any browser and on
//! GitHub.

use std::fmt::Write as _;

use crate::stats::Summary;

const PANEL_W: f64 = 330.0;
const PANEL_H: f64 = 250.0;
const MARGIN_L: f64 = 62.0;
const MARGIN_R: f64 = 14.0;
const MARGIN_T: f64 = 28.0;
const MARGIN_B: f64 = 44.0;
const HEADER_H: f64 = 64.0;
const MAX_COLUMNS: usize = 3;
/// Series colours (colour-blind friendly, Okabe–Ito), reused in order.
const COLORS: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
];

/// One panel of a bar chart: a value (min/median/max) per series, None = not measured.
pub struct BarPanel {
    pub title: String,
    pub values: Vec<Option<Summary>>,
}

/// One panel of a line chart: per series, one optional y per x label.
pub struct LinePanel {
    pub title: String,
    pub lines: Vec<Vec<Option<f64>>>,
}

/// Escapes text for SVG content and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => o.push(c),
        }
    }
    o
}

/// A "nice" upper bound (1, 2, 2.5, 5 × 10^k) at or above `x`.
pub fn nice_ceil(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= x * (1.0 - 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// Short number for axis labels: 1.5k, 2M, 0.25.
pub fn short(x: f64) -> String {
    let a = x.abs();
    let (v, suffix) = if a >= 1e9 {
        (x / 1e9, "G")
    } else if a >= 1e6 {
        (x / 1e6, "M")
    } else if a >= 1e3 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    let s = if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s}{suffix}")
}

struct Canvas {
    out: String,
}

impl Canvas {
    fn new(w: f64, h: f64) -> Canvas {
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
        );
        let _ = write!(
            out,
            r#"<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>"#
        );
        Canvas { out }
    }
    fn text(&mut self, x: f64, y: f64, anchor: &str, extra: &str, s: &str) {
        let _ = write!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" {extra}>{}</text>"#,
            esc(s)
        );
    }
    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, width: f64) {
        let _ = write!(
            self.out,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" stroke-width="{width}"/>"#
        );
    }
    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, title: &str) {
        let _ = write!(
            self.out,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"><title>{}</title></rect>"#,
            esc(title)
        );
    }
    fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

fn layout(n: usize) -> (usize, usize, f64, f64) {
    let cols = n.clamp(1, MAX_COLUMNS);
    let rows = n.div_ceil(cols).max(1);
    (
        cols,
        rows,
        cols as f64 * PANEL_W,
        HEADER_H + rows as f64 * PANEL_H,
    )
}

fn header(c: &mut Canvas, title: &str, series: &[String], width: f64) {
    c.text(
        width / 2.0,
        20.0,
        "middle",
        r#"font-size="15" font-weight="bold""#,
        title,
    );
    let mut x = 12.0;
    let mut y = 42.0;
    for (i, s) in series.iter().enumerate() {
        let w = 24.0 + 6.5 * s.chars().count() as f64;
        if x + w > width - 10.0 {
            x = 12.0;
            y += 16.0;
        }
        c.rect(x, y - 9.0, 12.0, 10.0, COLORS[i % COLORS.len()], s);
        c.text(x + 16.0, y, "start", "", s);
        x += w;
    }
}

fn panel_origin(i: usize, cols: usize) -> (f64, f64) {
    (
        (i % cols) as f64 * PANEL_W,
        HEADER_H + (i / cols) as f64 * PANEL_H,
    )
}

/// Places panel `i` of a grid with `cols` columns and writes its title. Returns the
/// plot area: x from `x0` to `x1`, y from `y0` (bottom) to `y1` (top).
fn panel_frame(c: &mut Canvas, i: usize, cols: usize, title: &str) -> (f64, f64, f64, f64) {
    let (ox, oy) = panel_origin(i, cols);
    let (x0, x1) = (ox + MARGIN_L, ox + PANEL_W - MARGIN_R);
    let (y0, y1) = (oy + PANEL_H - MARGIN_B, oy + MARGIN_T);
    c.text(
        (x0 + x1) / 2.0,
        oy + 16.0,
        "middle",
        r#"font-weight="bold""#,
        title,
    );
    (x0, x1, y0, y1)
}

/// The x and y axes of a panel's plot area and its rotated y-axis label.
fn panel_axes(c: &mut Canvas, (x0, x1, y0, y1): (f64, f64, f64, f64), y_label: &str) {
    c.line(x0, y0, x1, y0, "#333", 1.0);
    c.line(x0, y0, x0, y1, "#333", 1.0);
    let _ = write!(
        c.out,
        r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        x0 - MARGIN_L + 14.0,
        (y0 + y1) / 2.0,
        esc(y_label)
    );
}

/// Bars (height = median, whisker = min..max) per series, one panel per group.
pub fn bar_chart(title: &str, y_label: &str, series: &[String], panels: &[BarPanel]) -> String {
    let (cols, _, w, h) = layout(panels.len());
    let mut c = Canvas::new(w, h);
    header(&mut c, title, series, w);
    for (i, p) in panels.iter().enumerate() {
        let (x0, x1, y0, y1) = panel_frame(&mut c, i, cols, &p.title);
        let top = nice_ceil(p.values.iter().flatten().map(|s| s.max).fold(0.0, f64::max));
        let ys = |v: f64| y0 - (v / top).clamp(0.0, 1.0) * (y0 - y1);
        for t in 0..=4 {
            let v = top * t as f64 / 4.0;
            c.line(x0, ys(v), x1, ys(v), "#e0e0e0", 1.0);
            c.text(x0 - 4.0, ys(v) + 4.0, "end", "", &short(v));
        }
        panel_axes(&mut c, (x0, x1, y0, y1), y_label);
        let n = series.len().max(1) as f64;
        let slot = (x1 - x0) / n;
        for (j, v) in p.values.iter().enumerate() {
            let bx = x0 + slot * j as f64 + slot * 0.15;
            let bw = slot * 0.7;
            match v {
                Some(s) => {
                    let tip = format!(
                        "{}: median {} (min {}, max {})",
                        series.get(j).map_or("", |s| s),
                        short(s.median),
                        short(s.min),
                        short(s.max)
                    );
                    c.rect(
                        bx,
                        ys(s.median),
                        bw,
                        y0 - ys(s.median),
                        COLORS[j % COLORS.len()],
                        &tip,
                    );
                    let cx = bx + bw / 2.0;
                    c.line(cx, ys(s.min), cx, ys(s.max), "#222", 1.2);
                    c.line(cx - 4.0, ys(s.min), cx + 4.0, ys(s.min), "#222", 1.2);
                    c.line(cx - 4.0, ys(s.max), cx + 4.0, ys(s.max), "#222", 1.2);
                    c.text(
                        cx,
                        ys(s.max) - 3.0,
                        "middle",
                        r#"font-size="9""#,
                        &short(s.median),
                    );
                }
                None => c.text(
                    bx + bw / 2.0,
                    y0 - 4.0,
                    "middle",
                    r##"font-size="9" fill="#888""##,
                    "n/a",
                ),
            }
        }
    }
    c.finish()
}

/// Lines over categorical x labels on a log10 y axis (latency percentiles).
pub fn log_line_chart(
    title: &str,
    y_label: &str,
    series: &[String],
    x_labels: &[String],
    panels: &[LinePanel],
) -> String {
    let (cols, _, w, h) = layout(panels.len());
    let mut c = Canvas::new(w, h);
    header(&mut c, title, series, w);
    for (i, p) in panels.iter().enumerate() {
        let (x0, x1, y0, y1) = panel_frame(&mut c, i, cols, &p.title);
        let vals: Vec<f64> = p
            .lines
            .iter()
            .flatten()
            .flatten()
            .copied()
            .filter(|v| *v > 0.0)
            .collect();
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(0.0, f64::max);
        let (e0, e1) = if vals.is_empty() {
            (0, 1)
        } else {
            (
                lo.log10().floor() as i32,
                (hi.log10().ceil() as i32).max(lo.log10().floor() as i32 + 1),
            )
        };
        let ys = |v: f64| {
            y0 - ((v.max(1e-12).log10() - e0 as f64) / (e1 - e0) as f64).clamp(0.0, 1.0) * (y0 - y1)
        };
        for e in e0..=e1 {
            let v = 10f64.powi(e);
            c.line(x0, ys(v), x1, ys(v), "#e0e0e0", 1.0);
            c.text(x0 - 4.0, ys(v) + 4.0, "end", "", &short(v));
        }
        panel_axes(&mut c, (x0, x1, y0, y1), y_label);
        let nx = x_labels.len().max(2) as f64 - 1.0;
        let xs = |k: usize| x0 + 8.0 + (x1 - x0 - 16.0) * k as f64 / nx;
        for (k, l) in x_labels.iter().enumerate() {
            c.text(xs(k), y0 + 14.0, "middle", r#"font-size="9""#, l);
        }
        for (j, line) in p.lines.iter().enumerate() {
            let color = COLORS[j % COLORS.len()];
            let pts: Vec<String> = line
                .iter()
                .enumerate()
                .filter_map(|(k, v)| {
                    v.filter(|v| *v > 0.0)
                        .map(|v| format!("{:.1},{:.1}", xs(k), ys(v)))
                })
                .collect();
            if pts.is_empty() {
                continue;
            }
            let _ = write!(
                c.out,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
            for pt in &pts {
                let (x, y) = pt.split_once(',').unwrap_or(("0", "0"));
                let _ = write!(
                    c.out,
                    r#"<circle cx="{x}" cy="{y}" r="2.5" fill="{color}"/>"#
                );
            }
        }
    }
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(min: f64, med: f64, max: f64) -> Option<Summary> {
        Some(Summary {
            min,
            median: med,
            max,
            n: 3,
        })
    }

    #[test]
    fn nice_bounds_and_labels() {
        assert_eq!(nice_ceil(7.0), 10.0);
        assert_eq!(nice_ceil(1.0), 1.0);
        assert_eq!(nice_ceil(180.0), 200.0);
        assert_eq!(nice_ceil(2300.0), 2500.0);
        assert_eq!(nice_ceil(0.0), 1.0);
        assert_eq!(nice_ceil(f64::NAN), 1.0);
        assert_eq!(short(62_000.0), "62k");
        assert_eq!(short(1_500_000.0), "1.5M");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(12.5), "12.5");
    }

    #[test]
    fn bar_chart_is_well_formed_and_escaped() {
        let series = vec!["edgecache".to_string(), "nginx <aio>".to_string()];
        let panels = vec![
            BarPanel {
                title: "1 KiB".into(),
                values: vec![s(1.0, 2.0, 3.0), None],
            },
            BarPanel {
                title: "1 MiB & more".into(),
                values: vec![s(10.0, 20.0, 30.0), s(5.0, 6.0, 7.0)],
            },
        ];
        let svg = bar_chart("req/s", "requests/s", &series, &panels);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("nginx &lt;aio&gt;") && svg.contains("1 MiB &amp; more"));
        assert!(!svg.contains("<aio>"));
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        assert!(svg.contains("n/a"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn line_chart_handles_gaps_and_empty_panels() {
        let series = vec!["a".to_string(), "b".to_string()];
        let x = vec!["p50".to_string(), "p99".to_string(), "p99.9".to_string()];
        let panels = vec![
            LinePanel {
                title: "x".into(),
                lines: vec![vec![Some(100.0), Some(900.0), None], vec![None, None, None]],
            },
            LinePanel {
                title: "empty".into(),
                lines: vec![],
            },
        ];
        let svg = log_line_chart("latency", "µs", &series, &x, &panels);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
