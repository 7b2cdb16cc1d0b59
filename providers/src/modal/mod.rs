//! The modal variant: Modal's gRPC control plane (`modal.client.ModalClient`) and a task's
//! command router (`modal.task_command_router.TaskCommandRouter`).

pub mod client;
pub mod proto;
pub mod router;
pub mod sandbox;
