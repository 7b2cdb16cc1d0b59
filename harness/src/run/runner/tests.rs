use super::*;

fn coverage(files_scanned: u64, unreadable: u64, uid: u32) -> ScanCoverage {
    ScanCoverage {
        scanner: "the Python probe".to_owned(),
        files_scanned,
        unreadable,
        uid,
    }
}

#[test]
fn a_scan_passes_only_when_it_tested_something() {
    assert_eq!(
        judge_coverage(&coverage(5120, 0, 0), false, "docker"),
        Ok(())
    );
    assert_eq!(
        judge_coverage(&coverage(0, 0, 0), true, "docker"),
        Err("the Python probe read 0 files, so it tested nothing".to_owned())
    );
    // As root with a file it could not read, or as uid 1000: partial, failed unless
    // the step accepts the variant's partial scans.
    for partial in [
        coverage(5120, 3, 0),
        coverage(5120, 8, 1000),
        coverage(9, 0, 1000),
    ] {
        let refused = judge_coverage(&partial, false, "daytona").expect_err("partial");
        assert!(
            refused.starts_with(&format!(
                "the secrets scan was partial (uid {}, {} unreadable)",
                partial.uid, partial.unreadable
            )) && refused.ends_with("`accept_partial: [daytona]` on the step"),
            "{refused}"
        );
        assert_eq!(judge_coverage(&partial, true, "daytona"), Ok(()));
    }
}
