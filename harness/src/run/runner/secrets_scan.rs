//! The `secrets-scan` step: the image's doctor scanning natively through exec as root,
//! or the Python probe where it cannot, for every form of every secret of the run.

use super::*;

impl StepContext {
    pub(super) async fn secrets_scan(&self) -> Result<(), StepEnd> {
        let found = self.find_secrets().await?;
        if found.is_empty() {
            Ok(())
        } else {
            Err(StepEnd::Failed(format!(
                "build secret found: {}",
                found.join(", ")
            )))
        }
    }

    /// Looks for the run's secrets in the sandbox (as root where the variant can) and in
    /// the artifact's metadata; returns `name at location` for each hit. With none found,
    /// fails unless the scan tested something ([`judge_coverage`]): the `secrets-scan` step
    /// and check 9 accept a partial scan only where their `accept_partial:` names the variant.
    pub(super) async fn find_secrets(&self) -> Result<Vec<String>, StepEnd> {
        let sandbox = self.sandbox()?;
        let capabilities = self.provider.capabilities();
        let doctor = if capabilities.doctor_scan {
            match self.doctor_scan(&sandbox).await? {
                Ok(report) => Some(report),
                Err(why) => {
                    self.log.line(&format!(
                        "the image's doctor cannot scan ({why}); scanning with the Python probe instead"
                    ));
                    None
                }
            }
        } else {
            None
        };
        let scanner = if doctor.is_some() {
            "the image's doctor"
        } else {
            "the Python probe"
        };
        let report = match doctor {
            Some(report) => report,
            None => {
                let code = secrets::probe_code(&self.secrets);
                let stdout = if capabilities.exec_as_root {
                    self.python_exec(&sandbox, &code, true).await?
                } else {
                    let out = self.run_code(&sandbox, &code).await?;
                    if let Some(error) = out.error {
                        return Err(StepEnd::Failed(format!("the secrets probe raised {error}")));
                    }
                    out.stdout
                };
                secrets::parse_report(&stdout)?
            }
        };
        self.log.line(&format!(
            "{scanner} scanned {} files under {} as uid {} in {:.1} s ({} unreadable; home {}, working directory {}; not {}), process environments and command lines, for {} forms",
            report.files_scanned,
            report.roots.join(" "),
            report.uid,
            report.seconds,
            report.unreadable,
            report.home,
            report.cwd,
            report.skipped.join(" "),
            secrets::fingerprints(&self.secrets).len()
        ));
        self.state().secrets_scan = Some(ScanCoverage {
            scanner: scanner.to_owned(),
            files_scanned: report.files_scanned,
            unreadable: report.unreadable,
            uid: report.uid,
        });
        if let Some(last) = report.stopped_at {
            let so_far: Vec<String> = report
                .found
                .iter()
                .map(|f| format!("{} at {}", f.name, f.location))
                .collect();
            return Err(format!(
                "the secrets scan ran out of time after {:.0} s and {} files (the last {last}), so what it did not read is unknown; found so far: [{}]",
                report.seconds,
                report.files_scanned,
                so_far.join(", ")
            )
            .into());
        }
        let mut found = report.found;
        if capabilities.artifact_metadata {
            let artifact = self.artifact()?;
            let metadata = self.provider.artifact_metadata(&artifact).await?;
            found.extend(secrets::scan_metadata(&metadata, &self.secrets));
            self.log
                .line("searched the artifact's metadata for every form");
        }
        let found: Vec<String> = found
            .into_iter()
            .map(|f| format!("{} at {}", f.name, f.location))
            .collect();
        self.state().secrets_found.clone_from(&found);
        if found.is_empty() {
            let accepted = match &self.step.expect {
                Expectation::PartialScansFrom(variants) => variants.as_slice(),
                Expectation::Check(_, params) => params.accept_partial.as_slice(),
                _ => &[],
            }
            .contains(&self.labels.variant);
            let coverage = self.state().secrets_scan.clone();
            if let Some(coverage) = coverage {
                judge_coverage(&coverage, accepted, &self.labels.variant)
                    .map_err(StepEnd::Failed)?;
            }
        }
        Ok(found)
    }

    /// Has the image's doctor scan the sandbox as root: its report, or why it gave none
    /// (a missing doctor, or one older than `scan-secrets`). An exec that cannot be made
    /// at all is the step's error.
    pub(super) async fn doctor_scan(
        &self,
        sandbox: &SandboxId,
    ) -> Result<Result<secrets::ScanReport, String>, StepEnd> {
        let argv = secrets::doctor_command(&self.secrets);
        let out = self.provider.exec(sandbox, &argv, true).await?;
        Ok(match out.exit_code {
            Some(0) => secrets::parse_doctor_report(&out.stdout),
            code => {
                let said = out.stderr.lines().next().unwrap_or("").trim().to_owned();
                Err(match code {
                    Some(code) => format!("{} exited with {code}: {said}", argv[0]),
                    None => format!("{} did not exit: {said}", argv[0]),
                })
            }
        })
    }

    /// Runs `code` with `python3 -c` in the sandbox (as root when asked) and returns its
    /// stdout; a non-zero exit is an error carrying stderr.
    pub(super) async fn python_exec(
        &self,
        sandbox: &SandboxId,
        code: &str,
        as_root: bool,
    ) -> Result<String, StepEnd> {
        let argv = vec!["python3".to_owned(), "-c".to_owned(), code.to_owned()];
        let out = self.provider.exec(sandbox, &argv, as_root).await?;
        if out.exit_code == Some(0) {
            Ok(out.stdout)
        } else {
            let ended = match out.exit_code {
                Some(code) => format!("python3 exited with code {code}"),
                None => "python3 did not exit (no exit code came back)".to_owned(),
            };
            let said = out.stderr.trim();
            Err(StepEnd::Failed(if said.is_empty() {
                format!("{ended}, saying nothing on stderr")
            } else {
                format!("{ended}: {said}")
            }))
        }
    }
}
