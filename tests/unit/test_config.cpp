// train.yaml parsing and validation (runtime/src/config.cpp, docs/config.md).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "flashrec/errors.hpp"
#include "flashrec/runtime/config.hpp"

namespace config = flashrec::config;
using config::Action;
using config::Phase;

namespace {

// The message parse() throws for `yaml`, or "(no error)".
std::string error_of(const std::string& yaml) {
    try {
        config::parse(yaml, "train.yaml");
    } catch (const flashrec::ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

// The error names train.yaml, the line and the field, in what() and in the accessors.
void check_error(const std::string& yaml, int line, const std::string& field, const std::string& fragment) {
    INFO("yaml:\n" << yaml);
    std::string what = "(no error)";
    try {
        config::parse(yaml, "train.yaml");
    } catch (const flashrec::ConfigError& e) {
        what = e.what();
        CHECK(e.file() == "train.yaml");
        CHECK(e.line() == line);
        CHECK(e.field() == field);
    }
    INFO("what(): " << what);
    CHECK(what.starts_with("train.yaml:" + std::to_string(line) + ": " + field + " "));
    CHECK(what.find(fragment) != std::string::npos);
}

std::string fault_error(const std::string& spec) {
    try {
        config::parse_fault(spec, "--fault");
    } catch (const flashrec::ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// A file that removes itself.
struct TempFile {
    std::filesystem::path path;
    explicit TempFile(const std::string& text)
        : path(std::filesystem::temp_directory_path() /
               ("flashrec-test-config-" + std::to_string(::getpid()) + ".yaml")) {
        std::ofstream(path) << text;
    }
    ~TempFile() { std::filesystem::remove(path); }
};

const char* const kComplete = R"(# every section, every key, none at its default
job:
  name: llama-7b-ft
  nodes: 4
  ranks_per_node: 8
  dp: 8
  tp: 2
  pp: 2
  spare_nodes: 1
  hot_spares: 2
  steps: 5000
  seed: 18446744073709551615
  placement: cyclic
launch:
  program: bin/trainer
  args: [--lr, "3e-4", --batch, 32]
  mpirun_args: [--mca, btl, ^openib]
trainer:
  lr: 0.0003
  layers: [4096, 4096]
protection:
  enabled: true
  replicas: 2
  placement: ring
  chunk_bytes: 8MiB
checkpoint:
  dir: /scratch/ckpt
  every_steps: 500
  keep: 3
detection:
  heartbeat_ms: 50
  hang_timeout_ms: 5000
  startup_timeout_ms: 60000
  bind: 0.0.0.0
  port: 7070
  metrics: true
  metrics_port: 9100
  pass_on_losses: false
recovery:
  phase_deadline_ms: 2000
  max_epochs: 5
  spawn: false
  warm_relaunches: 1
slurm:
  drain_on_failure: false
  drain_reason: "flashrec: {classification}"
  when_spares_exhausted: checkpoint-and-requeue
logging:
  level: debug
  events: run.events.jsonl
  progress: false
faults:
  - role=3:step=10:phase=allreduce:action=kill
  - role=1,1,0:step=20:phase=sync:action=exit=7
  - role=spare:1:step=30:phase=recovery:action=stop
  - {role: "7,1,1", step: 40, phase: optimizer, action: exit=3}
  - role: spare:0
    step: 50
)";

}  // namespace

TEST_CASE("a complete train.yaml sets every field") {
    const auto c = config::parse(kComplete, "train.yaml");
    CHECK(c.path == "train.yaml");
    CHECK(c.job.name == "llama-7b-ft");
    CHECK(c.job.nodes == 4);
    CHECK(c.job.ranks_per_node == 8);
    CHECK(c.job.dp == 8);
    CHECK(c.job.tp == 2);
    CHECK(c.job.pp == 2);
    CHECK(c.job.world_size() == 32);
    CHECK(c.job.spare_nodes == 1);
    CHECK(c.job.hot_spares == 2);
    CHECK(c.job.steps == 5000);
    CHECK(c.job.seed == 18446744073709551615ULL);
    CHECK(c.job.placement == "cyclic");
    CHECK(c.launch.program == "bin/trainer");
    CHECK(c.launch.args == std::vector<std::string>{"--lr", "3e-4", "--batch", "32"});
    CHECK(c.launch.mpirun_args == std::vector<std::string>{"--mca", "btl", "^openib"});
    REQUIRE(c.trainer.IsMap());
    CHECK(c.trainer["lr"].as<double>() == doctest::Approx(0.0003));
    CHECK(c.trainer["layers"].size() == 2);
    CHECK(c.protection.enabled);
    CHECK(c.protection.replicas == 2);
    CHECK(c.protection.placement == "ring");
    CHECK(c.protection.chunk_bytes == 8 << 20);
    CHECK(c.checkpoint.dir == "/scratch/ckpt");
    CHECK(c.checkpoint.every_steps == 500);
    CHECK(c.checkpoint.keep == 3);
    CHECK(c.detection.heartbeat_ms == 50);
    CHECK(c.detection.hang_timeout_ms == 5000);
    CHECK(c.detection.startup_timeout_ms == 60000);
    CHECK(c.detection.bind == "0.0.0.0");
    CHECK(c.detection.port == 7070);
    CHECK(c.detection.metrics);
    CHECK(c.detection.metrics_port == 9100);
    CHECK_FALSE(c.detection.pass_on_losses);
    CHECK(c.recovery.phase_deadline_ms == 2000);
    CHECK(c.recovery.max_epochs == 5);
    CHECK_FALSE(c.recovery.spawn);
    CHECK(c.recovery.warm_relaunches == 1);
    CHECK_FALSE(c.slurm.drain_on_failure);
    CHECK(c.slurm.drain_reason == "flashrec: {classification}");
    CHECK(c.slurm.when_spares_exhausted == "checkpoint-and-requeue");
    CHECK(c.logging.level == "debug");
    CHECK(c.logging.events == "run.events.jsonl");
    CHECK_FALSE(c.logging.progress);

    REQUIRE(c.faults.size() == 5);
    const auto& f = c.faults;
    CHECK((!f[0].spare && f[0].dp == 3 && f[0].tp == 0 && f[0].pp == 0));
    CHECK((f[0].step == 10 && f[0].phase == Phase::allreduce && f[0].action == Action::kill));
    CHECK(f[0].text == "role=3:step=10:phase=allreduce:action=kill");
    CHECK((f[1].dp == 1 && f[1].tp == 1 && f[1].pp == 0));
    CHECK((f[1].phase == Phase::sync && f[1].action == Action::exit && f[1].exit_code == 7));
    CHECK((f[2].spare && f[2].spare_index == 1 && f[2].step == 30));
    CHECK((f[2].phase == Phase::recovery && f[2].action == Action::stop));
    CHECK((f[3].dp == 7 && f[3].tp == 1 && f[3].pp == 1 && f[3].step == 40));
    CHECK((f[3].phase == Phase::optimizer && f[3].action == Action::exit && f[3].exit_code == 3));
    CHECK(f[3].text == "role=7,1,1:step=40:phase=optimizer:action=exit=3");
    CHECK((f[4].spare && f[4].spare_index == 0 && f[4].step == 50));
    CHECK((f[4].phase == Phase::forward && f[4].action == Action::kill));  // the defaults
}

TEST_CASE("omitted sections and keys keep their defaults") {
    const config::Config defaults;
    for (const char* yaml : {"job:\n  name: tiny\n", "job:\n  name: tiny\nprotection:\ncheckpoint: {}\n"}) {
        INFO(yaml);
        const auto c = config::parse(yaml, "train.yaml");
        CHECK(c.job.name == "tiny");
        CHECK((c.job.nodes == 1 && c.job.ranks_per_node == 1 && c.job.world_size() == 1));
        CHECK((c.job.spare_nodes == 0 && c.job.hot_spares == 0));
        CHECK(c.job.steps == defaults.job.steps);
        CHECK(c.job.placement == "block");
        CHECK(c.launch.program.empty());
        CHECK(c.launch.args.empty());
        CHECK(c.trainer.IsNull());  // absent, or "trainer:" with nothing under it
        CHECK(c.protection.enabled);
        CHECK(c.protection.replicas == 1);
        CHECK(c.protection.placement == "node-aware");
        CHECK(c.protection.chunk_bytes == 256 << 10);
        CHECK(c.protection.thread_nice == 19);
        CHECK_FALSE(c.protection.device_hash);  // on only once measured on a GPU (docs/gpu.md)
        CHECK(c.protection.every == 1);  // a snapshot every step: the behaviour before protection.every
        CHECK((c.checkpoint.dir.empty() && c.checkpoint.every_steps == 0 && c.checkpoint.keep == 2));
        CHECK((c.detection.heartbeat_ms == 100 && c.detection.hang_timeout_ms == 10000));
        CHECK((c.detection.bind == "127.0.0.1" && c.detection.port == 0 && !c.detection.metrics));
        CHECK((c.recovery.phase_deadline_ms == 10000 && c.recovery.max_epochs == 3));
        CHECK((c.recovery.spawn && c.recovery.warm_relaunches == 2));
        CHECK((c.slurm.drain_on_failure && c.slurm.when_spares_exhausted == "shrink"));
        CHECK(c.slurm.drain_reason == defaults.slurm.drain_reason);
        CHECK((c.logging.level == "info" && c.logging.events.empty() && c.logging.progress));
        CHECK(c.faults.empty());
    }
}

TEST_CASE("protection.device_hash is a bool") {
    CHECK_FALSE(config::parse("protection:\n  device_hash: false\n", "train.yaml").protection.device_hash);
    CHECK(config::parse("protection:\n  device_hash: true\n", "train.yaml").protection.device_hash);
    CHECK_THROWS_AS(config::parse("protection:\n  device_hash: gpu\n", "train.yaml"), flashrec::Error);
}

TEST_CASE("sizes take bytes or a KiB/MiB/GiB suffix") {
    const auto chunk = [](const std::string& value) {
        return config::parse("protection:\n  chunk_bytes: " + value + "\n", "train.yaml")
            .protection.chunk_bytes;
    };
    CHECK(chunk("4096") == 4096);
    CHECK(chunk("64KiB") == 64 << 10);
    CHECK(chunk("4 MiB") == 4 << 20);
    CHECK(chunk("2GiB") == std::int64_t{2} << 30);
    check_error("protection:\n  chunk_bytes: 4MB\n", 2, "protection.chunk_bytes",
                "must be a size in bytes or with a KiB/MiB/GiB suffix (e.g. 4MiB), got '4MB'");
    check_error("protection:\n  chunk_bytes: 0\n", 2, "protection.chunk_bytes", "must be >= 1, got 0");
    check_error("protection:\n  chunk_bytes: 99999999999GiB\n", 2, "protection.chunk_bytes",
                "must be between 1 and");
}

TEST_CASE("load reads a file, and names it in errors") {
    {
        TempFile file("job:\n  name: from-disk\n  dp: 2\n  nodes: 2\n");
        const auto c = config::load(file.path.string());
        CHECK(c.path == file.path.string());
        CHECK(c.job.name == "from-disk");
        CHECK(c.job.dp == 2);
    }
    {
        TempFile file("job:\n  dp: 2\n  nodes: 2\n  tp: zero\n");
        try {
            config::load(file.path.string());
            FAIL("no error");
        } catch (const flashrec::ConfigError& e) {
            CHECK(std::string(e.what()) == file.path.string() + ":4: job.tp must be an integer, got 'zero'");
        }
    }
}

// --- bad files --------------------------------------------------------------------------

TEST_CASE("bad: missing file, directory, empty file") {
    const std::string missing = "/nonexistent/flashrec/train.yaml";
    CHECK_THROWS_WITH_AS(config::load(missing), (missing + ": cannot be read: no such file").c_str(),
                         flashrec::ConfigError);
    const auto directory = std::filesystem::temp_directory_path().string();
    CHECK_THROWS_WITH_AS(config::load(directory), (directory + ": cannot be read: it is a directory").c_str(),
                         flashrec::ConfigError);
    TempFile empty("");
    CHECK_THROWS_WITH_AS(config::load(empty.path.string()), doctest::Contains(": is empty"),
                         flashrec::ConfigError);
    CHECK(contains(error_of("# only a comment\n"), "train.yaml: is empty: expected a map of sections"));
}

TEST_CASE("bad: YAML syntax error reports yaml-cpp's line") {
    CHECK(error_of("job:\n  dp: 2\n tp: 1\n") == "train.yaml:3: YAML syntax error: end of map not found");
    CHECK(error_of("job:\n  dp: 2\n  tp: [1, 2\nprotection:\n  replicas: 1\n") ==
          "train.yaml:4: YAML syntax error: end of sequence flow not found");
    CHECK(error_of("job:\n\tdp: 2\n") == "train.yaml:2: YAML syntax error: illegal map value");
}

TEST_CASE("bad: shape of the document") {
    CHECK(error_of("- job\n- protection\n") ==
          "train.yaml:1: must be a map of sections (job, launch, trainer, protection, checkpoint, detection, "
          "mpi, recovery, slurm, logging, faults), got a list");
    CHECK(contains(error_of("job: {}\n---\njob: {}\n"), "train.yaml:3: holds more than one YAML document"));
    check_error("job: [1, 2]\n", 1, "job", "must be a map of settings, got a list");
    check_error("trainer: 3\n", 1, "trainer", "must be a map (it is handed to the trainer as is), got '3'");
    check_error("job:\n  dp: 2\n  dp: 3\n", 3, "job.dp", "is given twice (first on line 2)");
}

TEST_CASE("bad: unknown keys, with a suggestion when one is close") {
    check_error("protection:\n  enabled: true\n  replica: 2\n", 3, "protection.replica",
                "is not a known key (did you mean 'protection.replicas'?)");
    check_error("job: {}\nprotecton:\n  replicas: 1\n", 2, "protecton",
                "is not a known section (did you mean 'protection'?)");
    check_error("job:\n  replicas: 2\n", 2, "job.replicas",
                "is not a known key (it belongs in 'protection': protection.replicas)");
    check_error(
        "detection:\n  colour: blue\n", 2, "detection.colour",
        "is not a known key (known: heartbeat_ms, hang_timeout_ms, startup_timeout_ms, bind, port, metrics, metrics_port, pass_on_losses, node_timeout_ms)");
    CHECK(config::parse("trainer:\n  anything: goes\n  nested: {deep: [1]}\n", "t")
              .trainer["anything"]
              .as<std::string>() == "goes");
}

TEST_CASE("bad: wrong types") {
    check_error("job:\n  dp: 2\n  nodes: 2\nprotection:\n  replicas: two\n", 5, "protection.replicas",
                "must be an integer, got 'two'");
    check_error("protection:\n  enabled: maybe\n", 2, "protection.enabled",
                "must be true or false, got 'maybe'");
    check_error("job:\n  steps: 1.5\n", 2, "job.steps", "must be an integer, got '1.5'");
    check_error("job:\n  seed: -1\n", 2, "job.seed", "must be a non-negative integer, got '-1'");
    check_error("job:\n  seed: 18446744073709551616\n", 2, "job.seed",
                "must be between 0 and 18446744073709551615, got 18446744073709551616");
    check_error("job:\n  dp: 99999999999\n", 2, "job.dp",
                "must be between 1 and 2147483647, got 99999999999");
    check_error("job:\n  name: [a]\n", 2, "job.name", "must be a string, got a list");
    check_error("launch:\n  args: --lr 3\n", 2, "launch.args", "must be a list of strings");
    check_error("launch:\n  args:\n    - ok\n    - {a: 1}\n", 4, "launch.args[1]",
                "must be a string, got a map");
    check_error("detection:\n  heartbeat_ms:\n", 2, "detection.heartbeat_ms",
                "must be an integer, got nothing");
}

TEST_CASE("bad: job shape and counts") {
    for (const char* key : {"dp", "tp", "pp", "nodes", "ranks_per_node"}) {
        check_error("job:\n  name: x\n  " + std::string(key) + ": 0\n", 3, "job." + std::string(key),
                    "must be >= 1, got 0");
    }
    check_error("job:\n  hot_spares: -1\n", 2, "job.hot_spares", "must be >= 0, got -1");
    check_error("job:\n  spare_nodes: -2\n", 2, "job.spare_nodes", "must be >= 0, got -2");
    check_error("job:\n  steps: 0\n", 2, "job.steps", "must be >= 1, got 0");
    check_error("job:\n  name: my job\n", 2, "job.name", "must be 1-100 letters, digits");
    check_error("job:\n  name: a.b\n", 2, "job.name", "must be 1-100 letters, digits");
    CHECK(error_of("job:\n  nodes: 2\n  ranks_per_node: 3\n  dp: 2\n  tp: 2\n  pp: 2\n") ==
          "train.yaml:2: job.nodes * job.ranks_per_node = 2 * 3 = 6 must equal job.dp * job.tp * job.pp = "
          "2 * 2 * 2 = 8 (one active rank per role)");
    check_error("job:\n  dp: 4\n", 1, "job.nodes",
                "= 1 * 1 = 1 must equal job.dp * job.tp * job.pp = 4 * 1 * 1 = 4");
}

TEST_CASE("bad: protection.replicas range") {
    CHECK(error_of("job:\n  dp: 4\n  nodes: 4\nprotection:\n  enabled: true\n  replicas: 0\n") ==
          "train.yaml:6: protection.replicas must be >= 1 when protection is enabled, got 0");
    check_error("job:\n  dp: 4\n  nodes: 4\nprotection:\n  replicas: 4\n", 5, "protection.replicas",
                "must be <= job.dp - 1 = 3 (replicas live on other DP ranks), got 4");
    check_error("protection:\n  replicas: -1\n", 2, "protection.replicas", "must be >= 0, got -1");
    // Off, or dp = 1: no ring to check against.
    CHECK(config::parse("protection:\n  enabled: false\n  replicas: 0\n", "t").protection.replicas == 0);
    CHECK(config::parse("protection:\n  replicas: 3\n", "t").protection.replicas == 3);
}

TEST_CASE("protection.every: an integer >= 1 that checkpoints and replication faults agree with") {
    CHECK(config::parse("protection:\n  every: 8\n", "t").protection.every == 8);
    check_error("protection:\n  every: 0\n", 2, "protection.every", "must be >= 1, got 0");
    check_error("protection:\n  every: -3\n", 2, "protection.every", "must be >= 1, got -3");
    check_error("protection:\n  every: 2.5\n", 2, "protection.every", "must be an integer or 'auto', got '2.5'");
    check_error("protection:\n  every: Auto\n", 2, "protection.every", "must be an integer or 'auto', got 'Auto'");
    check_error("protection:\n  every: [4]\n", 2, "protection.every", "got a list");
    check_error("protection:\n  evry: 4\n", 2, "protection.evry", "did you mean 'protection.every'?");
    // HDF5 checkpoints are written from snapshot versions: only multiples of every exist.
    const std::string ckpt = "checkpoint:\n  dir: /tmp/ck\n  every_steps: 10\n";
    check_error("protection:\n  every: 4\n" + ckpt, 5, "checkpoint.every_steps",
                "must be a multiple of protection.every = 4 (a checkpoint is written from a snapshot version, "
                "and only multiples of protection.every are snapshotted), got 10");
    CHECK(config::parse("protection:\n  every: 5\n" + ckpt, "t").checkpoint.every_steps == 10);
    CHECK_NOTHROW(config::parse("protection:\n  enabled: false\n  every: 4\n" + ckpt, "t"));  // no snapshots at all
    // A replication-phase fault fires only while a snapshot is sent.
    check_error("job:\n  dp: 2\n  nodes: 2\nprotection:\n  every: 4\nfaults:\n  - role=1:step=6:phase=replication\n", 7,
                "faults[0]", "with protection.every = 4 only multiples of it are: got step 6");
    CHECK_NOTHROW(config::parse(
        "job:\n  dp: 2\n  nodes: 2\nprotection:\n  every: 4\nfaults:\n  - role=1:step=8:phase=replication\n"
        "  - role=1:step=6:phase=forward\n",
        "t"));
    config::Protection every4;
    every4.every = 4;
    config::Job job;
    job.dp = 2, job.nodes = 2;
    CHECK_THROWS_WITH_AS(config::validate_fault(config::parse_fault("role=1:step=5:phase=replication", "cli"), job,
                                                "--fault", every4),
                         doctest::Contains("only multiples of it are: got step 5"), flashrec::ConfigError);
    CHECK_NOTHROW(config::validate_fault(config::parse_fault("role=1:step=5:phase=replication", "cli"), job, "--fault"));
}

TEST_CASE("protection.replay_check: start (the default) probes replay only where k can be > 1") {
    CHECK(config::parse("protection:\n  every: 1\n", "t").protection.replay_check == "start");
    CHECK_FALSE(config::parse("protection:\n  every: 1\n", "t").protection.probes_replay());  // every: 1 replays no completed step
    CHECK(config::parse("protection:\n  every: 4\n", "t").protection.probes_replay());
    CHECK(config::parse("protection:\n  every: auto\n", "t").protection.probes_replay());
    CHECK_FALSE(config::parse("protection:\n  every: 4\n  replay_check: off\n", "t").protection.probes_replay());
    CHECK_FALSE(config::parse("protection:\n  enabled: false\n  every: 4\n", "t").protection.probes_replay());
    check_error("protection:\n  every: 4\n  replay_check: always\n", 3, "protection.replay_check",
                "must be one of");
}

TEST_CASE("protection.every: auto, with max_every a power of two >= 4 and a budget between 0 and 1") {
    const auto c = config::parse("protection:\n  every: auto\n", "t");
    CHECK(c.protection.every_auto());
    CHECK(c.protection.max_every == 64);
    CHECK(c.protection.overhead_budget == doctest::Approx(0.03));
    CHECK(c.protection.period() == 64);
    CHECK(config::parse("protection:\n  every: 4\n", "t").protection.period() == 4);
    CHECK_FALSE(config::parse("protection:\n  every: 4\n", "t").protection.every_auto());
    const auto tuned = config::parse("protection:\n  every: auto\n  max_every: 256\n  overhead_budget: 0.05\n", "t");
    CHECK(tuned.protection.max_every == 256);
    CHECK(tuned.protection.overhead_budget == doctest::Approx(0.05));
    check_error("protection:\n  every: auto\n  max_every: 12\n", 3, "protection.max_every", "must be a power of two");
    check_error("protection:\n  max_every: 2\n", 2, "protection.max_every", "must be between 4 and 1024, got 2");
    check_error("protection:\n  overhead_budget: 0\n", 2, "protection.overhead_budget", "between 0 and 1");
    check_error("protection:\n  overhead_budget: 1.5\n", 2, "protection.overhead_budget", "between 0 and 1");
    check_error("protection:\n  overhead_budget: 3%\n", 2, "protection.overhead_budget", "must be a number, got '3%'");
    // Under auto every multiple of max_every is snapshotted whatever k is: checkpoints and
    // replication faults must be at those.
    const std::string ckpt = "checkpoint:\n  dir: /tmp/ck\n  every_steps: 24\n";
    check_error("protection:\n  every: auto\n" + ckpt, 5, "checkpoint.every_steps",
                "must be a multiple of protection.max_every = 64 with protection.every = auto");
    CHECK_NOTHROW(config::parse("protection:\n  every: auto\n  max_every: 8\n" + ckpt, "t"));
    check_error("job:\n  dp: 2\n  nodes: 2\nprotection:\n  every: auto\nfaults:\n  - role=1:step=8:phase=replication\n",
                7, "faults[0]", "only multiples of protection.max_every = 64 are sure to be: got step 8");
    CHECK_NOTHROW(config::parse(
        "job:\n  dp: 2\n  nodes: 2\nprotection:\n  every: auto\nfaults:\n  - role=1:step=128:phase=replication\n", "t"));
}

TEST_CASE("bad: detection and checkpoint ranges") {
    check_error("detection:\n  heartbeat_ms: 0\n", 2, "detection.heartbeat_ms", "must be >= 1, got 0");
    check_error("detection:\n  startup_timeout_ms: 500\n", 2, "detection.startup_timeout_ms", "must be >= 1000, got 500");
    check_error("detection:\n  heartbeat_ms: 200\n  hang_timeout_ms: 200\n", 3, "detection.hang_timeout_ms",
                "must be > detection.heartbeat_ms = 200, got 200");
    check_error("detection:\n  heartbeat_ms: 20000\n", 1, "detection.hang_timeout_ms",
                "must be > detection.heartbeat_ms = 20000, got 10000 (the default)");
    check_error("detection:\n  port: 70000\n", 2, "detection.port", "must be between 0 and 65535, got 70000");
    check_error("detection:\n  metrics_port: -1\n", 2, "detection.metrics_port",
                "must be between 0 and 65535, got -1");
    check_error("detection:\n  bind: ''\n", 2, "detection.bind", "must not be empty");
    check_error("checkpoint:\n  keep: 0\n", 2, "checkpoint.keep", "must be >= 1, got 0");
    check_error("checkpoint:\n  every_steps: -5\n", 2, "checkpoint.every_steps", "must be >= 0, got -5");
    check_error("checkpoint:\n  every_steps: 50\n", 2, "checkpoint.every_steps",
                "is 50 but checkpoint.dir is not set");
    check_error("checkpoint:\n  every_steps: 50\n  dir: ''\n", 3, "checkpoint.dir",
                "must not be empty when checkpoint.every_steps > 0");
    check_error("recovery:\n  max_epochs: 0\n", 2, "recovery.max_epochs", "must be >= 1, got 0");
}

TEST_CASE("bad: enumerations") {
    check_error("job:\n  placement: blok\n", 2, "job.placement",
                "must be one of block, cyclic; got 'blok' (did you mean 'block'?)");
    check_error("protection:\n  placement: rack\n", 2, "protection.placement",
                "must be one of node-aware, ring; got 'rack'");
    check_error("logging:\n  level: verbose\n", 2, "logging.level",
                "must be one of debug, info, warn, error; got 'verbose'");
    check_error("logging:\n  level: INFO\n", 2, "logging.level", "(did you mean 'info'?)");
    check_error("slurm:\n  when_spares_exhausted: requeue\n", 2, "slurm.when_spares_exhausted",
                "must be one of shrink, checkpoint-and-requeue; got 'requeue'");
}

TEST_CASE("bad: Slurm policies that cannot work") {
    check_error("slurm:\n  when_spares_exhausted: checkpoint-and-requeue\n", 2, "slurm.when_spares_exhausted",
                "is checkpoint-and-requeue, which needs checkpoint.dir");
    check_error("slurm:\n  drain_reason: 'flashrec {clasification}'\n", 2, "slurm.drain_reason", "clasification");
    check_error("slurm:\n  drain_reason: 'flashrec {step'\n", 2, "slurm.drain_reason", "");
    CHECK_NOTHROW(flashrec::config::parse("slurm:\n  drain_reason: '{node} of job {job}: {classification} at {step}'\n",
                                          "train.yaml"));
}

TEST_CASE("slurm.launch: mpirun by default; srun (direct launch) only without spawned spares") {
    CHECK(flashrec::config::parse("job:\n  name: t\n", "train.yaml").slurm.launch == "mpirun");
    const auto direct = flashrec::config::parse("slurm:\n  launch: srun\nrecovery:\n  spawn: false\n", "train.yaml");
    CHECK(direct.slurm.launch == "srun");
    check_error("slurm:\n  launch: direct\n", 2, "slurm.launch", "must be one of mpirun, srun, auto; got 'direct'");
    // recovery.spawn defaults to true: refused at the line of slurm.launch, saying what to set.
    check_error("slurm:\n  launch: srun\n", 2, "slurm.launch", "set recovery.spawn: false");
}

TEST_CASE("detection.node_timeout_ms: more than two heartbeats") {
    CHECK(flashrec::config::parse("job:\n  name: t\n", "train.yaml").detection.node_timeout_ms == 1000);
    check_error("detection:\n  heartbeat_ms: 100\n  node_timeout_ms: 200\n", 3, "detection.node_timeout_ms",
                "must be > 2 x detection.heartbeat_ms = 200");
    check_error("detection:\n  node_timeout_ms: 0\n", 2, "detection.node_timeout_ms", "must be >= 1, got 0");
}

TEST_CASE("bad: faults in the list") {
    const std::string job = "job:\n  dp: 4\n  nodes: 4\n  hot_spares: 1\n";  // faults: on line 5
    check_error(job + "faults: role=1:step=3\n", 5, "faults",
                "must be a list of fault specs, got 'role=1:step=3'");
    check_error(job + "faults:\n  - role=1:stpe=3\n", 6, "faults[0]",
                "'role=1:stpe=3': unknown part 'stpe' (did you mean 'step'?)");
    check_error(job + "faults:\n  - role=1:step=3\n  - role=2:step=x\n", 7, "faults[1]",
                "'role=2:step=x': step must be a non-negative integer, got 'x'");
    check_error(job + "faults:\n  - role=1:step=3:phase=fwd\n", 6, "faults[0]",
                "phase must be one of forward, allreduce, sync, optimizer, replication, recovery, tp_exchange, pp_exchange, "
                "protection_start, loop_end, after_loop, finish, finalize; got 'fwd'");
    // The points after the last step name the last step (job.steps defaults to 100).
    check_error(job + "faults:\n  - role=1:step=3:phase=finish\n", 6, "faults[0]",
                "'role=1:step=3:phase=finish': phase finish comes after the last step: its step must be "
                "job.steps - 1 = 99, got 3");
    check_error(job + "faults:\n  - role=1:step=3:action=crash\n", 6, "faults[0]",
                "action must be one of kill, exit, exit=<code>, stop; got 'crash'");
    check_error(job + "faults:\n  - role=1,2:step=3\n", 6, "faults[0]",
                "role must be <dp>, <dp>,<tp>,<pp> or spare:<i>, got '1,2'");
    check_error(job + "faults:\n  - role=1\n", 6, "faults[0]", "'role=1': step is missing");
    check_error(job + "faults:\n  - [1, 2]\n", 6, "faults[0]", "must be a fault spec string or a map");
    // Role outside the shape: checked in parse, once the job section is known.
    check_error(job + "faults:\n  - role=4:step=3\n", 6, "faults[0]",
                "'role=4:step=3': role 4,0,0: dp coordinate 4 is outside job.dp = 4 (valid: 0..3)");
    check_error(job + "faults:\n  - role=1,1,0:step=3\n", 6, "faults[0]",
                "tp coordinate 1 is outside job.tp = 1 (valid: 0..0)");
    check_error(job + "faults:\n  - role=spare:1:step=3\n", 6, "faults[0]",
                "role spare:1 is outside job.hot_spares = 1 (valid: spare:0..spare:0)");
    check_error("faults:\n  - role=spare:0:step=3\n", 2, "faults[0]", "(the job has no hot spares)");
    // Map form: errors point at the key.
    check_error(job + "faults:\n  - role: 1\n    step: 3\n    phsae: sync\n", 8, "faults[0].phsae",
                "is not a known key (did you mean 'faults[0].phase'?)");
    check_error(job + "faults:\n  - role: 1\n    step: 3\n    phase: later\n", 8, "faults[0].phase",
                "must be one of forward");
    check_error(job + "faults:\n  - step: 3\n", 6, "faults[0].role", "is missing");
    check_error(job + "faults:\n  - {step: 3, role: 9}\n", 6, "faults[0].role",
                "9,0,0: dp coordinate 9 is outside job.dp = 4");
}

// --- the --fault grammar on its own -------------------------------------------------------

TEST_CASE("parse_fault reads the --fault grammar") {
    auto f = config::parse_fault("role=2:step=7:phase=replication:action=exit=42", "--fault");
    CHECK((!f.spare && f.dp == 2 && f.tp == 0 && f.pp == 0 && f.step == 7));
    CHECK((f.phase == Phase::replication && f.action == Action::exit && f.exit_code == 42));
    CHECK(f.text == "role=2:step=7:phase=replication:action=exit=42");
    f = config::parse_fault("action=stop:step=0:role=spare:3", "--fault");  // any order
    CHECK((f.spare && f.spare_index == 3 && f.step == 0 && f.action == Action::stop));
    f = config::parse_fault("role=0,1,2:step=5:action=exit", "--fault");
    CHECK((f.dp == 0 && f.tp == 1 && f.pp == 2 && f.action == Action::exit && f.exit_code == 1));
    CHECK(f.phase == Phase::forward);
    for (auto phase : {Phase::forward, Phase::allreduce, Phase::sync, Phase::optimizer, Phase::replication,
                       Phase::recovery})
        CHECK(config::parse_fault("role=0:step=1:phase=" + config::to_string(phase), "x").phase == phase);
    CHECK(config::to_string(Action::exit) == "exit");
}

TEST_CASE("bad: parse_fault names the spec and the wrong part") {
    CHECK(fault_error("") == "--fault: fault '': empty fault spec");
    CHECK(fault_error("role=spare:step=3") ==
          "--fault: fault 'role=spare:step=3': role spare needs an index: role=spare:<i>");
    CHECK(fault_error("role=1:step=3:kill") ==
          "--fault: fault 'role=1:step=3:kill': 'kill' is not <key>=<value>");
    CHECK(fault_error("role=1:step=3:step=4") ==
          "--fault: fault 'role=1:step=3:step=4': step is given twice");
    CHECK(fault_error("role=1:step=-3") ==
          "--fault: fault 'role=1:step=-3': step must be a non-negative integer, got '-3'");
    CHECK(fault_error("role=1:step=3:action=exit=300") ==
          "--fault: fault 'role=1:step=3:action=exit=300': action exit code must be between 0 and 255, got "
          "'exit=300'");
    CHECK(fault_error("role=1:step=3:action=kill=9") ==
          "--fault: fault 'role=1:step=3:action=kill=9': action 'kill' takes no value, got 'kill=9'");
    CHECK(fault_error("step=3") == "--fault: fault 'step=3': role is missing");
    CHECK(fault_error("role=a,b,c:step=3") ==
          "--fault: fault 'role=a,b,c:step=3': role must be <dp>, <dp>,<tp>,<pp> or spare:<i>, got 'a,b,c'");
    CHECK(contains(fault_error("role=1:step=3:"), "'' is not <key>=<value>"));

    config::Job job;
    job.dp = 2;
    job.nodes = 2;
    CHECK_NOTHROW(config::validate_fault(config::parse_fault("role=1:step=1", "cli"), job, "cli"));
    CHECK_THROWS_WITH_AS(
        config::validate_fault(config::parse_fault("role=0,0,1:step=1", "cli"), job, "cli"),
        "cli: fault 'role=0,0,1:step=1': role 0,0,1: pp coordinate 1 is outside job.pp = 1 (valid: 0..0)",
        flashrec::ConfigError);
}

TEST_CASE("the annotated example in docs/config.md is valid") {
    const auto doc = std::filesystem::path(__FILE__).parent_path() / "../../docs/config.md";
    std::ifstream in(doc);
    REQUIRE_MESSAGE(in.good(), "cannot read " << doc);
    std::stringstream text;
    text << in.rdbuf();
    const std::string markdown = text.str();
    const std::string opening = "```yaml\n# train.yaml";
    const auto begin = markdown.find(opening);
    REQUIRE(begin != std::string::npos);
    const auto body = begin + std::string("```yaml\n").size();
    const auto end = markdown.find("```", body);
    const auto c = config::parse(markdown.substr(body, end - body), "docs/config.md");
    CHECK(c.job.world_size() == c.job.nodes * c.job.ranks_per_node);
    CHECK_FALSE(c.faults.empty());
}

TEST_CASE("recovery.nccl_repair: auto (the default), shrink_grow or reinit; anything else names the line") {
    CHECK(config::parse("recovery:\n  max_epochs: 3\n", "t").recovery.nccl_repair == "auto");
    CHECK(config::parse("recovery:\n  nccl_repair: reinit\n", "t").recovery.nccl_repair == "reinit");
    CHECK(config::parse("recovery:\n  nccl_repair: shrink_grow\n", "t").recovery.nccl_repair == "shrink_grow");
    check_error("recovery:\n  max_epochs: 3\n  nccl_repair: grow\n", 3, "recovery.nccl_repair", "must be one of");
}

TEST_CASE("slurm.launch: srun is direct launch; auto only where nothing needs mpirun") {
    config::Config c;
    CHECK_FALSE(config::direct_launch_chosen(c));  // mpirun, the default
    c.slurm.launch = "srun";
    CHECK(config::direct_launch_chosen(c));
    c.slurm.launch = "auto";
    CHECK_FALSE(config::direct_launch_chosen(c));  // recovery.spawn defaults to true
    c.recovery.spawn = false;
    CHECK(config::direct_launch_chosen(c));
    c.job.ranks_per_node = 2;  // a rank's death on a shared node is repaired in-job (trap 17's keeper)
    CHECK(config::direct_launch_chosen(c));
    c.launch.mpirun_args = {"--bind-to", "core"};  // mpirun's own flags, which srun would drop
    CHECK_FALSE(config::direct_launch_chosen(c));
}
