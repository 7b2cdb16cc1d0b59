use super::*;

#[test]
fn names_and_encodes() {
    let labels = RunLabels {
        run_id: "20260913T120850Z-ABC123".into(),
        variant: "e2b".into(),
        scenario: "core-tier".into(),
    };
    assert_eq!(
        template_name(&labels),
        "sm-20260913t120850z-abc123-core-tier"
    );
    assert_eq!(encode("a=b&c"), "a%3Db%26c");
}

#[tokio::test]
async fn artifact_metadata_holds_every_log_page_and_the_template_entry() {
    use wiremock::matchers::{method, path, query_param};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    let status = "/templates/tpl1/builds/b1/status";
    let page = |from: usize, count: usize| {
        let lines: Vec<String> = (from..from + count).map(|i| format!("line {i}")).collect();
        json!({"templateID": "tpl1", "buildID": "b1", "status": "ready",
                   "logs": lines, "logEntries": []})
    };
    for (offset, count) in [(0, LOG_PAGE), (LOG_PAGE, 3)] {
        Mock::given(method("GET"))
            .and(path(status))
            .and(query_param("logsOffset", offset.to_string()))
            .respond_with(ResponseTemplate::new(200).set_body_json(page(offset, count)))
            .expect(1)
            .mount(&server)
            .await;
    }
    Mock::given(method("GET"))
        .and(path("/v2/templates"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            {"templateID": "other", "names": ["x"]},
            {"templateID": "tpl1", "names": ["sm-run"], "buildStatus": "ready"},
        ])))
        .mount(&server)
        .await;
    let provider = E2bProvider::new(
        Endpoints {
            api_base: server.uri(),
            sandbox_domain: "sandbox.invalid".into(),
        },
        Mode::Live,
        // A fake key, made up for this test.
        Secret::new("E2B_API_KEY", "fake-e2b-key"),
        Arc::default(),
        BuildOptions::default(),
    )
    .unwrap();
    let artifact = Artifact {
        id: "tpl1:b1".into(),
        kind: ARTIFACT_KIND.into(),
    };
    let metadata: Value =
        serde_json::from_str(&provider.artifact_metadata(&artifact).await.unwrap()).unwrap();
    assert_eq!(metadata["build"][1]["logs"][2], "line 102");
    assert_eq!(metadata["build"].as_array().unwrap().len(), 2);
    assert_eq!(
        metadata["template"],
        json!([{"templateID": "tpl1", "names": ["sm-run"], "buildStatus": "ready"}])
    );
    let wrong = Artifact {
        id: "tpl1".into(),
        kind: ARTIFACT_KIND.into(),
    };
    assert_eq!(
        provider.artifact_metadata(&wrong).await.unwrap_err().kind,
        ErrorKind::Config
    );
}
