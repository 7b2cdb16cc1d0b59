//! Template builds: the build request checked as E2B's API and builder check it, run by
//! `template.rs`, and its status.

use super::*;

/// The fields of a build start request (`TemplateBuildStartV2`) the emulator implements.
const BUILD_FIELDS: &[&str] = &[
    "force",
    "fromImage",
    "fromImageRegistry",
    "readyCmd",
    "startCmd",
    "steps",
];

/// The fields of a build step (`TemplateStep`) the emulator implements.
const STEP_FIELDS: &[&str] = &["type", "args", "force", "filesHash", "forceUpload"];

/// The step types the emulator implements.
const STEP_TYPES: &[&str] = &["COPY", "ENV", "RUN", "USER", "WORKDIR"];

impl Emulator {
    pub(super) fn start_build(&self, tid: &str, body: &Value) -> Answer {
        if let Err(refused) = implemented(body) {
            return refused;
        }
        if let Err(template::Refusal::Unimplemented(why)) = template::dockerfile(&body["steps"]) {
            return Answer::error(501, &why);
        }
        let text = |name: &str| {
            body[name]
                .as_str()
                .filter(|v| !v.trim().is_empty())
                .map(str::to_owned)
        };
        let start_cmd = text("startCmd");
        if start_cmd.is_none() && text("readyCmd").is_some() {
            return Answer::error(
                400,
                "readyCmd needs a startCmd: there is nothing to wait for",
            );
        }
        let Some(from_image) = text("fromImage") else {
            return Answer::error(400, "the build names no fromImage");
        };
        let mut world = self.world();
        let Some(template) = world.templates.iter_mut().find(|t| t.id == tid) else {
            return Answer::error(404, "template not found");
        };
        template.start_cmd = start_cmd;
        let (logs, outcome) = (template.logs.clone(), template.outcome.clone());
        let (name, bid) = (template.name.clone(), template.build.clone());
        // What the builder would refuse fails the build at its step, as E2B reports it.
        let context = builder_rules(tid, &body["steps"], &world.uploads).and_then(|()| {
            template::build_context(
                &std::env::temp_dir(),
                tid,
                &bid,
                &body["steps"],
                &world.uploads,
            )
            .map_err(|refusal| match refusal {
                template::Refusal::Fails(why) | template::Refusal::Unimplemented(why) => why,
            })
        });
        drop(world);
        let context = match context {
            Ok(context) => context,
            Err(failed) => {
                logs.lock().expect("logs").push(failed.clone());
                *outcome.lock().expect("outcome") = Some(Err(failed));
                return Answer::empty(202);
            }
        };
        let login = &body["fromImageRegistry"];
        let password = login["password"].as_str();
        let (base, registry_credential, secrets) =
            if from_image == sandbox_providers::docker::base::BASE_IMAGE {
                // The local base: the password handed over is the run's canary.
                let canary = password.map(|p| vec![Secret::new("REGISTRY_TOKEN", p)]);
                (
                    sandbox_providers::BaseImage::local(from_image),
                    None,
                    canary.unwrap_or_default(),
                )
            } else {
                let registry = from_image.split('/').next().unwrap_or_default().to_owned();
                let credential = password.map(|p| sandbox_providers::RegistryCredential {
                    registry: registry.clone(),
                    username: login["username"].as_str().unwrap_or_default().to_owned(),
                    password: Secret::new("E2B_FROM_IMAGE_REGISTRY", p),
                    source: sandbox_providers::CredentialSource::Static,
                });
                let base = sandbox_providers::BaseImage {
                    reference: from_image,
                    registry: Some(registry),
                };
                (base, credential, Vec::new())
            };
        let request = BuildRequest {
            environment_dir: context.dir().to_owned(),
            base,
            registry_credential,
            build_secrets: secrets,
            labels: RunLabels {
                run_id: self.inner.run_id.clone().unwrap_or(name),
                variant: "e2b-emulator".into(),
                scenario: "build".into(),
            },
        };
        self.inner.site.made_under(&request.labels);
        let docker = self.inner.site.backend().clone();
        tokio::spawn(async move {
            let sink = logs.clone();
            let log = move |line: &str| sink.lock().expect("logs").push(line.to_owned());
            let result = docker
                .build(&request, &log)
                .await
                .map_err(|e| e.to_string());
            drop(context);
            *outcome.lock().expect("outcome") = Some(result);
        });
        Answer::empty(202)
    }
    pub(super) fn build_status(&self, tid: &str, bid: &str, query: &str) -> Answer {
        let world = self.world();
        let Some(template) = world
            .templates
            .iter()
            .find(|t| t.id == tid && t.build == bid)
        else {
            return Answer::error(404, "build not found");
        };
        let offset: usize = query_param(query, "logsOffset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let logs = template.logs.lock().expect("logs").clone();
        let outcome = template.outcome.lock().expect("outcome").clone();
        let new: Vec<&String> = logs.iter().skip(offset).take(100).collect();
        let status = match (&outcome, offset + new.len() >= logs.len()) {
            (Some(Ok(_)), true) => "ready",
            (Some(Err(_)), true) => "error",
            _ => "building",
        };
        let entries: Vec<Value> = new
            .iter()
            .map(|m| json!({"timestamp": now(), "message": m, "level": "info"}))
            .collect();
        let mut info = json!({"templateID": tid, "buildID": bid, "status": status,
                              "logs": new, "logEntries": entries});
        if let (Some(Err(e)), "error") = (&outcome, status) {
            info["reason"] = json!({"message": e});
        }
        Answer::json(200, info)
    }
}

/// Refuses, by name, a build request field or step the emulator does not implement (501).
pub(super) fn implemented(body: &Value) -> Result<(), Answer> {
    let unimplemented = |what: String| {
        Err(Answer::error(
            501,
            &format!(
                "the e2b emulator does not implement {what}; it refuses it rather than drop it"
            ),
        ))
    };
    for field in body.as_object().into_iter().flat_map(|o| o.keys()) {
        if !BUILD_FIELDS.contains(&field.as_str()) {
            return unimplemented(format!("the build field `{field}`"));
        }
    }
    for (i, step) in body["steps"].as_array().into_iter().flatten().enumerate() {
        for field in step.as_object().into_iter().flat_map(|o| o.keys()) {
            if !STEP_FIELDS.contains(&field.as_str()) {
                return unimplemented(format!("the step field `{field}` (step {i})"));
            }
        }
        let kind = step["type"].as_str().unwrap_or_default();
        if !STEP_TYPES.contains(&kind) {
            return unimplemented(format!("the step type `{kind}` (step {i})"));
        }
    }
    Ok(())
}

/// What E2B's template builder (e2b-dev/infra at [`INFRA_COMMIT`]) fails a build with
/// before any step's work: a `COPY` whose upload is missing or not gzipped (`copy.go`
/// unpacks it with `tar -xzvf`), a `RUN` whose user, its second argument, is empty (`run.go`
/// takes it as the user; envd's `authenticate.go` refuses the name). The message is the
/// builder's, with the step.
pub(super) fn builder_rules(
    tid: &str,
    steps: &Value,
    uploads: &HashMap<(String, String), Vec<u8>>,
) -> Result<(), String> {
    for step in steps.as_array().into_iter().flatten() {
        let args: Vec<String> = strings(&step["args"]).collect();
        let shown = format!(
            "{} {}",
            step["type"].as_str().unwrap_or_default(),
            args.join(" ")
        );
        match step["type"].as_str() {
            Some("COPY") => {
                let hash = step["filesHash"].as_str().unwrap_or_default();
                match uploads.get(&(tid.to_owned(), hash.to_owned())) {
                    None => {
                        return Err(format!("{shown}: no files uploaded for hash `{hash}`"));
                    }
                    Some(bytes) if !bytes.starts_with(&[0x1f, 0x8b]) => {
                        return Err(format!(
                            "{shown}: tar -xzvf: gzip: stdin: not in gzip format (the builder unpacks every upload as gzip: e2b-dev/infra@{INFRA_COMMIT} packages/orchestrator/pkg/template/build/commands/copy.go)"
                        ));
                    }
                    Some(_) => {}
                }
            }
            Some("RUN") if args.len() >= 2 && args[1].is_empty() => {
                return Err(format!(
                    "failed to run command '{}': invalid username: '' (the builder runs a RUN as its second argument, run.go; envd refuses an empty user, authenticate.go: e2b-dev/infra@{INFRA_COMMIT})",
                    args[0]
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The template build `selector` names, as E2B resolves a create's `templateID`: `name`
/// or `id` (its `default` tag), `name:tag` or `id:tag`, or `id:buildID`; the newest
/// build wins.
pub(super) fn resolve<'a>(templates: &'a [Template], selector: &str) -> Option<&'a Template> {
    let (head, tag) = selector.split_once(':').unwrap_or((selector, "default"));
    templates.iter().rev().find(|t| {
        (t.id == head || t.name == head)
            && (t.tags.iter().any(|g| g == tag) || (t.id == head && t.build == tag))
    })
}
