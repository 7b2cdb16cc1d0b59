//! The tests that need a Docker engine (required under CI=true, reported `ignored` with
//! their reason elsewhere: `common::trials`), in one binary so that `cargo test` runs them side by side: most of
//! their time is the engine's and the sandboxes' (builds, container starts, kernels, a
//! budget running out), not this process's. One module per subject; filter by module,
//! e.g. `cargo test -p sandbox-matrix --test engine violations::`.
//!
//! Not here: `base_from_image` (it retags the reference base the others build on),
//! `sweep` and `sweep_cloud` (a sweep without `--run` may remove what a neighbour is
//! using). The `author_*` modules' authoring tests are ignored: they rewrite cassettes
//! (`cargo test -p sandbox-matrix --test engine -- --ignored author_e2b::`); `drift::`
//! authors them again into a temporary folder and diffs them with the committed ones.

#[path = "../common/mod.rs"]
mod common;

mod author_daytona;
mod author_e2b;
mod author_modal;
mod breakage;
mod cloud_call_timeout;
mod crash_cleanup;
mod datalayer_push;
mod datalayer_runtimes;
mod daytona_object_storage;
mod drift;
mod emulate_daytona;
mod emulate_e2b;
mod interrupt;
mod json_diff;
mod junit_reader;
mod kernel_death;
mod launch_exit;
mod launch_hang;
mod lifetime;
mod modal_cli;
mod modal_client_emulator;
mod modal_emulator;
mod parity;
mod preflight;
mod private_base;
mod run_emulated;
mod sandbox_state;
mod sdk_datalayer;
mod sdk_daytona;
mod sdk_e2b;
mod sdk_modal;
mod server_rules;
mod shared_build;
mod violations;

use common::trials::Need;

fn main() {
    let mut args = libtest_mimic::Arguments::from_args();
    common::trials::waiting_threads(&mut args);
    #[rustfmt::skip]
    let trials = trials![
        Need::Nothing => [
            sync cloud_call_timeout::silent_e2b_and_daytona_services_fail_build_at_the_step_budget,
            sync drift::ids_times_and_repeated_polls_are_not_drift_but_a_changed_request_is,
            sync json_diff::one_step_added_or_changed_is_one_difference_each_not_a_shifted_tail,
            sync preflight::without_credentials_each_missing_variable_is_named,
            sync preflight::an_unknown_variant_is_bad_input,
        ];
        Need::Docker => [
            async(4) author_daytona::author_daytona_cassettes @ignored,
            async(4) author_daytona::author_daytona_build_cassettes @ignored,
            async(4) author_daytona::recording_with_fake_credentials_writes_none_of_them,
            async(2) author_e2b::author_e2b_cassettes @ignored,
            async(2) author_modal::author_modal_cassettes @ignored,
            async(2) author_modal::author_modal_fault_cassettes @ignored,
            sync breakage::violations_fail_their_step_and_leave_nothing_behind,
            async(2) crash_cleanup::a_failed_build_leaves_only_images_with_every_run_label,
            sync crash_cleanup::kill_9_during_a_classic_build_then_sweep_leaves_nothing,
            sync crash_cleanup::kill_9_during_a_buildkit_build_then_sweep_leaves_nothing,
            sync crash_cleanup::kill_9_during_launch_then_sweep_leaves_nothing,
            sync crash_cleanup::kill_9_during_first_result_then_sweep_leaves_nothing,
            sync crash_cleanup::sigterm_during_launch_cleans_up_writes_reports_and_exits_143,
            sync crash_cleanup::sighup_twice_quits_at_once_and_the_printed_sweep_command_removes_the_rest,
            sync crash_cleanup::kill_9_one_second_into_a_buildkit_build_then_sweep_leaves_nothing_later,
            sync crash_cleanup::kill_9_two_seconds_into_a_buildkit_build_then_sweep_leaves_nothing_later,
            sync crash_cleanup::kill_9_one_second_into_a_datalayer_build_then_sweep_leaves_nothing_later,
            sync crash_cleanup::kill_9_during_a_datalayer_push_then_sweep_leaves_nothing_later,
            sync crash_cleanup::sigterm_one_second_into_a_buildkit_build_leaves_nothing_later,
            sync crash_cleanup::sigint_one_second_into_a_buildkit_build_leaves_nothing_later,
            sync datalayer_push::preflight_checks_both_logins_and_names_a_refused_one,
            async(2) datalayer_push::the_push_logs_in_with_a_login_token_from_ecr_in_preflight_and_in_a_run,
            sync datalayer_push::without_a_registry_or_the_tools_to_start_one_the_variant_is_skipped_with_the_install_command,
            sync datalayer_push::a_killed_run_takes_its_registry_down_and_sweep_removes_what_it_left,
            async(2) datalayer_runtimes::author_datalayer_runtimes_cassettes @ignored,
            async(2) datalayer_runtimes::the_lifecycle_passes_leaves_no_runtime_and_writes_no_credential,
            async(2) datalayer_runtimes::runtimes_are_deleted_by_pod_name_and_a_uid_finds_nothing,
            async(2) datalayer_runtimes::a_runtime_ends_when_its_credits_are_spent_and_an_unknown_field_is_refused,
            async(2) datalayer_runtimes::a_refused_create_fails_launch_and_a_warming_ingress_is_waited_for,
            async(2) drift::e2b,
            async(4) drift::daytona,
            async(2) drift::modal,
            async(2) drift::datalayer_runtimes,
            async(2) emulate_daytona::the_daytona_client_runs_the_lifecycle_against_emulate_over_https_through_live_forms,
            async(2) emulate_e2b::the_e2b_client_runs_the_lifecycle_against_emulate_over_https_through_live_host_forms,
            async(2) emulate_e2b::without_a_start_command_the_code_channel_does_not_answer,
            async(2) emulate_e2b::the_e2b_emulator_builds_the_steps_it_is_sent_as_e2bs_builder_runs_them,
            sync emulate_e2b::the_e2b_base_phase_names_what_the_base_lacks_and_takes_the_debian_family_only,
            sync interrupt::ctrl_c_mid_step_still_removes_the_container,
            async(2) kernel_death::the_request_after_a_kernel_died_is_answered,
            sync launch_exit::a_sandbox_that_exits_fails_launch_with_its_exit_code_and_last_log_lines,
            sync launch_exit::a_hung_kernel_start_fails_first_result_at_the_step_budget,
            sync launch_hang::a_sandbox_that_hangs_without_exiting_fails_launch_at_its_budget_and_is_removed,
            sync modal_cli::modal_runs_live_records_and_replays_through_the_cli,
            async(1) modal_client_emulator::the_projects_modal_client_runs_execs_against_emulate_modal,
            async(1) modal_emulator::emulate_modal_checks_tokens_requests_and_router_jwts,
            async(1) modal_emulator::emulate_modal_injects_unavailable_once_and_sandboxes_without_a_task,
            sync preflight::against_the_emulator_and_a_registry_holding_the_base_e2b_is_ready,
            async(2) private_base::the_base_is_pulled_by_digest_with_a_login_token_from_ecr,
            sync run_emulated::a_scenario_outside_scenarios_runs_emulated_on_every_cloud_variant,
            sync lifetime::an_e2b_sandbox_answers_before_its_timeout_and_is_gone_after,
            sync lifetime::an_e2b_sandbox_killed_early_fails_the_step_as_an_early_death,
            sync lifetime::a_daytona_sandbox_killed_early_fails_the_step_as_an_early_death,
            sync lifetime::modal_and_datalayer_sandboxes_end_at_their_limits_under_run_emulated,
            sync sandbox_state::a_sandbox_killed_during_a_step_is_said_killed_with_its_last_log_lines,
            sync sandbox_state::a_paused_sandbox_is_said_to_have_stopped_answering,
            sync sandbox_state::a_cloud_sandbox_killed_during_a_step_is_said_ended_by_its_provider,
            sync sandbox_state::a_sandbox_stopped_during_restart_or_the_secrets_scan_is_said_so,
            async(2) daytona_object_storage::daytona_object_storage_takes_what_push_access_signs_and_the_runner_builds_from_it,
            async(2) server_rules::daytona_answers_404_for_the_build_logs_of_a_snapshot_no_runner_holds,
            async(2) server_rules::daytona_runs_process_execute_as_its_toolbox_does,
            async(2) server_rules::daytona_refuses_a_negative_interpreter_timeout_and_an_execute_field_it_does_not_implement,
            async(2) server_rules::daytona_runs_interpreter_code_with_envs_and_within_its_timeout_as_its_toolbox_does,
            sync shared_build::scenarios_of_one_environment_build_once_and_the_last_removes_it,
            async(2) violations::each_violating_image_fails_what_it_breaks_and_nothing_else,
        ];
        Need::Sdk(datalayer_push::SDK) => [
            async(2) datalayer_push::pushes_an_index_with_attestations_and_launches_it_pulled_by_the_reader,
        ];
        Need::Sdk(junit_reader::SDK) => [
            sync junit_reader::junitparser_sees_suites_named_by_variant_and_mode,
        ];
        Need::Sdk(parity::datalayer_runtimes::SDK) => [
            async(2) parity::datalayer_runtimes::our_datalayer_client_sends_what_datalayer_core_sends_for_each_intent,
        ];
        Need::Sdk(parity::daytona::SDK) => [
            async(2) parity::daytona::our_daytona_client_sends_what_the_daytona_sdk_sends_for_each_intent,
        ];
        Need::Sdk(parity::e2b::SDK) => [
            async(2) parity::e2b::our_e2b_client_sends_what_the_e2b_sdk_sends_for_each_intent,
        ];
        Need::Sdk(parity::modal::SDK) => [
            async(2) parity::modal::our_modal_client_sends_what_the_modal_client_sends_for_each_intent,
        ];
        Need::Sdk(sdk_datalayer::SDK) => [
            sync sdk_datalayer::datalayers_client_runs_its_runtime_flow_against_emulate_datalayer,
        ];
        Need::Sdk(sdk_daytona::SDK) => [
            sync sdk_daytona::the_daytona_sdk_runs_its_flow_against_emulate_daytona,
        ];
        Need::Sdk(sdk_e2b::SDK) => [
            sync sdk_e2b::the_e2b_sdk_runs_its_flow_against_emulate_e2b,
        ];
        Need::Sdk(sdk_modal::SDK) => [
            sync sdk_modal::the_modal_client_runs_its_sandbox_flow_against_emulate_modal,
        ];
    ];
    libtest_mimic::run(&args, trials).exit();
}
