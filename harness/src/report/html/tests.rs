use super::charts::{Scale, minute, value_text};
use super::*;
use crate::report::fixture::{failed, two_variants, with_repetitions};

const GATE_EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/gate/results.json");

/// `results` as an earlier run: another id, started `days` days before the fixture's run,
/// every duration scaled by `factor`.
fn earlier(results: &RunResults, days: u32, factor: f64) -> RunResults {
    let mut run = results.clone();
    run.provenance.run_id = format!("202511{:02}T121314Z-0000{days:02}", 29 - days);
    run.provenance.started_at = format!("2025-11-{:02}T12:13:14Z", 29 - days);
    for scenario in &mut run.scenarios {
        for step in &mut scenario.steps {
            step.duration = step.duration.mul_f64(factor);
        }
        for timing in &mut scenario.timings {
            timing.duration = timing.duration.mul_f64(factor);
        }
    }
    run
}

fn history_of(results: &RunResults) -> History {
    History {
        runs: vec![earlier(results, 2, 1.2), earlier(results, 1, 0.9)],
        warnings: Vec::new(),
    }
}

/// `text` parsed as XML, allowing the page's `<!DOCTYPE html>`.
fn xml(text: &str) -> Result<roxmltree::Document<'_>, roxmltree::Error> {
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(text, options)
}

/// Every `<svg>…</svg>` of `page`.
fn svgs(page: &str) -> Vec<&str> {
    page.match_indices("<svg ")
        .map(|(start, _)| {
            let end = page[start..].find("</svg>").expect("every svg is closed");
            &page[start..start + end + "</svg>".len()]
        })
        .collect()
}

#[test]
fn the_page_of_a_fixed_run_with_history() {
    let results = with_repetitions();
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        insta::assert_snapshot!("report_html", render(&results, &history_of(&results)));
    });
}

#[test]
fn the_page_and_each_svg_are_well_formed_xml_with_nothing_external() {
    let results = results::load(Path::new(GATE_EXAMPLE)).expect("the gate example loads");
    let page = render(&results, &history_of(&results));
    xml(&page).unwrap_or_else(|e| panic!("the page is XML: {e}"));
    let svgs = svgs(&page);
    let metrics = stats::metrics(&results).len();
    // A strip plot per metric (one variant here), and a history chart per metric.
    assert_eq!(svgs.len(), 2 * metrics, "{metrics} metrics");
    for svg in svgs {
        let doc =
            roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("an svg is XML: {e}\n{svg}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        assert_eq!(
            root.tag_name().namespace(),
            Some("http://www.w3.org/2000/svg")
        );
        assert!(
            root.descendants().any(|n| n.has_tag_name("text")),
            "an svg without labels: {svg}"
        );
    }
    assert!(!page.to_lowercase().contains("<script"), "no JavaScript");
    assert_eq!(
        page.matches("http").count(),
        page.matches("http://www.w3.org/2000/svg").count(),
        "no address but the SVG namespace"
    );
    for attribute in ["src=", "href=", "@import", "url("] {
        assert!(!page.contains(attribute), "{attribute} in the page");
    }
}

#[test]
fn replayed_columns_and_rows_say_so() {
    let page = render(&two_variants(), &History::default());
    assert!(
        page.contains(
            "<tr><th></th><th>docker · live</th><th class=\"replay\">e2b · replay</th></tr>"
        ),
        "{page}"
    );
    assert!(
        page.contains("<tr><th>Build</th><td>12.3 s</td><td class=\"replay\">replayed</td></tr>"),
        "{page}"
    );
    assert!(
        page.contains(
            "<tr><th>Resources leaked</th><td>0</td><td class=\"replay\">replayed: 0</td></tr>"
        ),
        "a replay's count is marked: {page}"
    );
    // Skips are listed apart from failures.
    let (failures, skipped) = page
        .split_once("<h2>Failures</h2>")
        .and_then(|(_, rest)| rest.split_once("<h2>Skipped</h2>"))
        .expect("a Failures list, then a Skipped list");
    assert!(!failures.contains("skipped:"), "{failures}");
    assert!(skipped.contains("skipped:"), "{skipped}");
    assert!(
            page.contains("<p class=\"note\">e2b · replay: replayed, not measured, from:</p>\n<ul class=\"note\">\n<li>`fixtures/cassettes/e2b/lifecycle.yaml`, written 2026-11-29, instant pace, timings read `replayed`: authored from e2b/openapi.yml@0.1.0, answered by an emulator</li>"),
            "{page}"
        );
    assert!(
        page.contains("text-anchor=\"end\">e2b · replay</text>"),
        "the strip plots name the replayed row"
    );
}

#[test]
fn an_emulated_column_has_its_own_class_and_note() {
    use crate::report::fixture::{EMULATOR, emulated_source};
    let mut results = two_variants();
    let mut emulated = results.scenarios[0].clone();
    emulated.variant = "e2b".to_owned();
    emulated.source = emulated_source();
    results.scenarios.push(emulated);
    let page = render(&results, &History::default());
    assert!(
            page.contains(
                "<tr><th></th><th>docker · live</th><th class=\"replay\">e2b · replay</th><th class=\"emulated\">e2b · emulated</th></tr>"
            ),
            "{page}"
        );
    assert!(
            page.contains(
                "<tr><th>Build</th><td>12.3 s</td><td class=\"replay\">replayed</td><td class=\"emulated\">emulated: 12.3 s</td></tr>"
            ),
            "{page}"
        );
    assert!(
            page.contains(&format!(
                "<p class=\"note\">e2b · emulated: measured against sandbox-matrix&#39;s emulator over the local engine, not against the provider:</p>\n<ul class=\"note\">\n<li>{}</li>",
                esc(EMULATOR)
            )),
            "{page}"
        );
    assert!(STYLE.contains("\n.emulated {"), "the class has a style");
    assert!(
        page.contains("text-anchor=\"end\">e2b · emulated</text>"),
        "the strip plots name the emulated row apart"
    );
}

#[test]
fn strings_from_results_are_escaped() {
    let mut results = two_variants();
    results.scenarios[1].steps[2].status = failed("<script>alert(\"owned\")</script> & 'more'");
    results.scenarios[1].variant = "e2b<b>".to_owned();
    results.scenarios[1].artifact_id = Some("tpl\"><script>x</script>".to_owned());
    results.provenance.host = "<img src=x>".to_owned();
    let page = render(&results, &History::default());
    assert!(!page.contains("<script"), "{page}");
    assert!(!page.contains("<b>"));
    assert!(!page.contains("<img"));
    assert!(
        page.contains("&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt; &amp; &#39;more&#39;")
    );
    assert!(page.contains("e2b&lt;b&gt;"));
    xml(&page).unwrap_or_else(|e| panic!("still XML: {e}"));
}

#[test]
fn failed_attempts_sit_in_the_failed_column() {
    let page = render(&with_repetitions(), &History::default());
    // docker's restart failed once in three repetitions: one cross, a failed p90.
    let restart = &page[page
        .find("<code>step:restart</code>")
        .expect("a restart chart")..];
    let restart = svgs(restart)[0];
    assert_eq!(restart.matches("<title>failed</title>").count(), 1);
    assert!(restart.contains("<title>p90 failed</title>"));
    assert!(restart.contains(">67%</text>"));
}

#[test]
fn a_wide_span_is_on_a_log_scale_with_units() {
    let log = Scale::fit(&[200.0, 45_000.0], (0.0, 100.0), 6);
    assert!(log.log);
    let labels: Vec<String> = log.ticks().into_iter().map(|(_, l)| l).collect();
    assert_eq!(
        labels,
        ["200 ms", "1 s", "5 s", "20 s"],
        "8 round ticks thinned to 4"
    );
    assert!(log.x(200.0) < log.x(1_000.0) && log.x(1_000.0) < log.x(45_000.0));

    let linear = Scale::fit(&[1_900.0, 2_400.0], (0.0, 100.0), 6);
    assert!(!linear.log);
    let ticks = linear.ticks();
    assert_eq!(ticks.first().map(|t| t.1.as_str()), Some("1.8 s"));
    assert_eq!(ticks.last().map(|t| t.1.as_str()), Some("2.5 s"));
    assert!((linear.x(1_800.0) - 0.0).abs() < 1e-9);
    assert!((linear.x(2_500.0) - 100.0).abs() < 1e-9);

    let close = Scale::fit(&[37_820.0, 37_822.0], (0.0, 100.0), 6);
    let labels: Vec<String> = close.ticks().into_iter().map(|(_, l)| l).collect();
    assert_eq!(
        labels,
        ["37 s", "37.5 s", "38 s", "38.5 s", "39 s"],
        "values 2 ms apart get an axis of a few percent with distinct labels"
    );
    assert!(close.x(50_000.0) <= 100.0 && close.x(0.0) >= 0.0, "clamped");

    let minutes = Scale::fit(&[150_000.0, 400_000.0], (0.0, 100.0), 6);
    assert!(minutes.ticks().iter().all(|(_, l)| l.ends_with(" min")));
}

#[test]
fn rfc3339_times_read_as_unix_seconds() {
    assert_eq!(minute("2025-11-29T12:13:14.512+00:00"), "2025-11-29 12:13");
    assert_eq!(
        value_text(Value::Measured(Duration::from_micros(2_500))),
        "2.5 ms"
    );
    assert_eq!(
        value_text(Value::Measured(Duration::from_millis(412))),
        "412 ms"
    );
    assert_eq!(
        value_text(Value::Measured(Duration::from_secs(150))),
        "2.5 min"
    );
    assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0.0));
    assert_eq!(unix_seconds("2025-11-29T12:13:14Z"), Some(1_764_418_394.0));
    assert_eq!(
        unix_seconds("2025-11-29T13:13:14.5+01:00"),
        Some(1_764_418_394.5)
    );
    assert_eq!(
        unix_seconds("2000-03-01T00:00:00-00:30"),
        Some(951_870_600.0)
    );
    for bad in [
        "",
        "yesterday",
        "2025-13-01T00:00:00Z",
        "2025-11-29T12:13:14",
        "2025-11-29T12:13:14+0100",
    ] {
        assert_eq!(unix_seconds(bad), None, "{bad}");
    }
}

#[test]
fn history_loads_oldest_first_skipping_what_it_cannot_read() {
    let dir = std::env::temp_dir().join(format!("sm-html-history-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let current = two_variants();
    let write = |name: &str, run: &RunResults| {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string(run).expect("serializes")).expect("writes");
        path
    };
    let newest = write("c.json", &earlier(&current, 1, 1.0));
    let broken = dir.join("b.json");
    std::fs::write(&broken, "{\"schema_version\": ").expect("writes");
    let oldest = write("a.json", &earlier(&current, 3, 1.0));
    let itself = write("d.json", &current);
    let never = write("e.json", &earlier(&current, 5, 1.0));
    let history = History::load(
        [itself, newest, broken.clone(), oldest, never],
        &current.provenance.run_id,
        2,
    );
    let listed = history_files(&dir, &mut Vec::new());
    let _ = std::fs::remove_dir_all(&dir);
    let days: Vec<&str> = history
        .runs
        .iter()
        .map(|r| &r.provenance.started_at[..10])
        .collect();
    assert_eq!(
        days,
        ["2025-11-26", "2025-11-28"],
        "at most 2, oldest first"
    );
    assert_eq!(history.warnings.len(), 1, "{:?}", history.warnings);
    assert!(history.warnings[0].contains(&broken.display().to_string()));
    let names: Vec<_> = listed.iter().filter_map(|p| p.file_name()).collect();
    assert_eq!(names, ["e.json", "d.json", "c.json", "b.json", "a.json"]);

    let mut history = history;
    history.keep_newest(1);
    assert_eq!(
        history.runs[0].provenance.started_at,
        "2025-11-28T12:13:14Z"
    );
}
