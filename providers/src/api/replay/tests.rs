use super::*;

#[test]
fn a_latency_no_duration_holds_never_panics() {
    assert_eq!(delay(Pace::Recorded, 1500.0), Duration::from_millis(1500));
    for huge in [1e300, f64::INFINITY, f64::NAN, -5.0] {
        assert!(
            delay(Pace::Recorded, huge) <= Duration::from_secs(3600),
            "{huge}"
        );
    }
}
