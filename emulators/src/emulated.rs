//! The providers sandbox-matrix emulates, and what results run against an emulator say
//! they came from.

/// The domain an emulator serves when none is given: `.test` never resolves on the
/// Internet (RFC 6761), so only a pinned client reaches it.
pub const DEFAULT_DOMAIN: &str = "emulator.test";

/// The providers sandbox-matrix emulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emulated {
    /// E2B's control plane, envd and the code interpreter.
    E2b,
    /// Daytona's API and toolbox.
    Daytona,
    /// Modal's gRPC control plane and task command router.
    Modal,
    /// Datalayer's runtimes API and each runtime's Jupyter Server at its ingress.
    Datalayer,
}

impl Emulated {
    /// The emulator cloud variant `variant` runs against; `None` for a variant with none.
    pub fn of_variant(variant: &str) -> Option<Self> {
        match variant {
            "e2b" => Some(Self::E2b),
            "daytona" => Some(Self::Daytona),
            "modal" => Some(Self::Modal),
            sandbox_providers::datalayer::runtimes::VARIANT => Some(Self::Datalayer),
            _ => None,
        }
    }

    /// The provider's name, as people write it.
    pub fn provider(self) -> &'static str {
        match self {
            Self::E2b => "E2B",
            Self::Daytona => "Daytona",
            Self::Modal => "Modal",
            Self::Datalayer => "Datalayer",
        }
    }
}

/// What results of `variant` run against its emulator say they came from:
/// `sandbox-matrix 0.9.0's E2B emulator over the local Docker engine`.
pub fn describe(variant: &str) -> String {
    let provider: &str = match Emulated::of_variant(variant) {
        Some(which) => which.provider(),
        None => variant,
    };
    format!(
        "sandbox-matrix {}'s {provider} emulator over the local Docker engine, not {provider}",
        env!("CARGO_PKG_VERSION")
    )
}
