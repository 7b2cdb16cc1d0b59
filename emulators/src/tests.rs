use super::*;

#[test]
fn every_cloud_variant_has_an_emulator_named_in_its_results() {
    for variant in ["e2b", "daytona", "modal", "datalayer-runtimes"] {
        let which = Emulated::of_variant(variant).expect("an emulator");
        let said = describe(variant);
        assert!(
            said.contains(&format!("{} emulator", which.provider()))
                && said.ends_with(&format!("not {}", which.provider())),
            "{said}"
        );
    }
    assert_eq!(Emulated::of_variant("docker"), None);
}
