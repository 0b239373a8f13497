//! The plots of BENCHMARKS.md: pending small files and cumulative compute over time.

use super::*;

/// An SVG chart, one line per policy: pending small files over time above, cumulative modelled
/// compute below.
pub fn render_svg(reports: &[PolicyReport]) -> String {
    let (width, panel, margin) = (960.0, 300.0, 50.0);
    let end = reports
        .iter()
        .flat_map(|report| report.series.last().map(|(t, _)| *t))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let height = 2.0 * panel + margin;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let pending: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|report| {
            report
                .series
                .iter()
                .map(|(t, files)| (*t as f64, *files as f64))
                .collect()
        })
        .collect();
    let compute: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|report| {
            let mut points = vec![(0.0, 0.0)];
            points.extend(
                report
                    .compute_series
                    .iter()
                    .map(|(t, s)| (*t as f64, *s / 3600.0)),
            );
            points.push((end, report.compute_seconds / 3600.0));
            points
        })
        .collect();
    let names: Vec<&str> = reports
        .iter()
        .map(|report| report.policy.as_str())
        .collect();
    svg.push_str(&svg_panel(
        "Pending small files over time (all tables)",
        0.0,
        (width, panel, margin),
        end,
        &names,
        &pending,
    ));
    svg.push_str(&svg_panel(
        "Cumulative modelled compute (hours)",
        panel,
        (width, panel, margin),
        end,
        &names,
        &compute,
    ));
    svg.push_str("</svg>\n");
    svg
}

/// One panel of [`render_svg`]: lines of (millis, value) points, an hour axis, the top value.
pub(super) fn svg_panel(
    title: &str,
    top_y: f64,
    (width, height, margin): (f64, f64, f64),
    end: f64,
    names: &[&str],
    lines: &[Vec<(f64, f64)>],
) -> String {
    let colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let top = lines
        .iter()
        .flatten()
        .map(|(_, value)| *value)
        .fold(0.0f64, f64::max)
        .max(1.0);
    let (bottom, plot_top) = (top_y + height - margin / 2.0, top_y + margin);
    let mut svg = format!(
        "<text x=\"{margin}\" y=\"{}\" font-size=\"14\">{title}</text>\n<line x1=\"{margin}\" y1=\"{bottom}\" x2=\"{}\" y2=\"{bottom}\" stroke=\"black\"/>\n<line x1=\"{margin}\" y1=\"{plot_top}\" x2=\"{margin}\" y2=\"{bottom}\" stroke=\"black\"/>\n<text x=\"{}\" y=\"{}\">hours</text>\n<text x=\"5\" y=\"{}\">{top:.0}</text>\n",
        top_y + 20.0,
        width - margin,
        width - margin - 30.0,
        bottom + 16.0,
        plot_top + 4.0
    );
    for hour in (0..=(end / HOUR as f64) as i64).step_by(24) {
        let x = margin + (hour * HOUR) as f64 / end * (width - 2.0 * margin);
        svg.push_str(&format!(
            "<text x=\"{x:.0}\" y=\"{}\">{hour}</text>\n",
            bottom + 16.0
        ));
    }
    for (index, points) in lines.iter().enumerate() {
        let points: Vec<String> = points
            .iter()
            .map(|(t, value)| {
                let x = margin + t / end * (width - 2.0 * margin);
                let y = bottom - value / top * (bottom - plot_top);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let colour = colours[index % colours.len()];
        svg.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.2\" points=\"{}\"/>\n",
            points.join(" ")
        ));
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{}</text>\n",
            width - margin - 120.0,
            plot_top + 16.0 * index as f64,
            names.get(index).copied().unwrap_or_default()
        ));
    }
    svg
}
