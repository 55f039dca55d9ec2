// mpi.transport (runtime/src/config.cpp) with its environment overrides, and when the progress
// ticker runs (ft/progress_ticker.hpp): docs/config.md "mpi", docs/ulfm-traps.md trap 11.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "flashrec/errors.hpp"
#include "flashrec/ft/exit_notices.hpp"
#include "flashrec/ft/progress_ticker.hpp"
#include "flashrec/runtime/config.hpp"

namespace config = flashrec::config;
using flashrec::ft::InBandDetector;
using flashrec::ft::ticker_interval;
using namespace std::chrono_literals;

namespace {

config::Mpi with(const config::Mpi& mpi, const std::map<std::string, std::string>& env) {
    return config::with_environment(mpi, [&](const char* name) -> const char* {
        const auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
    });
}

std::string error_of(const std::string& yaml) {
    try {
        config::parse(yaml, "train.yaml");
    } catch (const flashrec::ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("mpi: defaults, yaml, and what train.yaml refuses") {
    const auto defaults = config::parse("job: {name: t}\n", "train.yaml").mpi;
    CHECK(defaults.transport == "auto");
    CHECK_FALSE(defaults.detector);
    CHECK(config::parse("mpi: {transport: shm, detector: true}\n", "train.yaml").mpi.detector);
    CHECK(error_of("mpi: {detector: yes please}\n").find("mpi.detector") != std::string::npos);
    CHECK(defaults.detector_period_ms == 200);
    CHECK(defaults.detector_timeout_ms == 2000);
    const auto set = config::parse("mpi: {transport: shm, detector_period_ms: 100, detector_timeout_ms: 500}\n",
                                   "train.yaml").mpi;
    CHECK(set.transport == "shm");
    CHECK(set.detector_period_ms == 100);
    CHECK(set.detector_timeout_ms == 500);
    CHECK(config::parse("mpi: {transport: auto}\n", "train.yaml").mpi.transport == "auto");
    CHECK(error_of("mpi: {transport: sm}\n").find("mpi.transport must be one of tcp, shm, auto") != std::string::npos);
    // ofi is known and refused with its reason (docs/ulfm-traps.md trap 12), not "one of".
    const auto ofi = error_of("mpi: {transport: ofi}\n");
    CHECK(ofi.find("mpi.transport is 'ofi', which Open MPI 5.0.10 cannot run fault-tolerantly") != std::string::npos);
    CHECK(ofi.find("BTL OFI will now abort") != std::string::npos);
    CHECK(ofi.find("one of") == std::string::npos);
    CHECK(error_of("mpi: {detector_period_ms: 200, detector_timeout_ms: 300}\n")
              .find("mpi.detector_timeout_ms must be >= 2 * mpi.detector_period_ms = 400") != std::string::npos);
    CHECK(error_of("mpi: {detector_period_ms: 0}\n").find("mpi.detector_period_ms") != std::string::npos);
    CHECK(defaults.yield_when_idle == "auto");
    CHECK(config::parse("mpi: {yield_when_idle: true}\n", "train.yaml").mpi.yield_when_idle == "true");
    CHECK(config::parse("mpi: {yield_when_idle: false}\n", "train.yaml").mpi.yield_when_idle == "false");
    CHECK(error_of("mpi: {yield_when_idle: sometimes}\n").find("mpi.yield_when_idle must be one of auto, true, false") !=
          std::string::npos);
    // A detection key in the wrong section says where it belongs.
    CHECK(error_of("detection: {transport: shm}\n").find("it belongs in 'mpi'") != std::string::npos);
}

TEST_CASE("mpi: the environment overrides train.yaml; empty means unset") {
    config::Mpi yaml;
    yaml.transport = "shm";
    CHECK(with(yaml, {}).transport == "shm");
    CHECK(with(yaml, {{"FLASHREC_TRANSPORT", ""}}).transport == "shm");
    CHECK(with(yaml, {{"FLASHREC_TRANSPORT", "tcp"}}).transport == "tcp");
    const auto both = with(yaml, {{"FLASHREC_DETECTOR_PERIOD_MS", "50"}, {"FLASHREC_DETECTOR_TIMEOUT_MS", "400"}});
    CHECK(both.detector_period_ms == 50);
    CHECK(both.detector_timeout_ms == 400);
    CHECK(with(yaml, {{"FLASHREC_DETECTOR", "on"}}).detector);
    CHECK_FALSE(with(config::Mpi{.detector = true}, {{"FLASHREC_DETECTOR", "off"}}).detector);
    CHECK_THROWS_WITH_AS(with(yaml, {{"FLASHREC_DETECTOR", "true"}}),
                         doctest::Contains("FLASHREC_DETECTOR must be on or off, got 'true'"), flashrec::ConfigError);
    CHECK_THROWS_WITH_AS(with(yaml, {{"FLASHREC_TRANSPORT", "ofi"}}),
                         doctest::Contains("FLASHREC_TRANSPORT is 'ofi', which Open MPI 5.0.10 cannot run"),
                         flashrec::ConfigError);
    CHECK_THROWS_WITH_AS(with(yaml, {{"FLASHREC_TRANSPORT", "verbs"}}),
                         doctest::Contains("FLASHREC_TRANSPORT must be one of tcp, shm, auto"), flashrec::ConfigError);
    CHECK(with(yaml, {{"FLASHREC_YIELD_WHEN_IDLE", "true"}}).yield_when_idle == "true");
    CHECK_THROWS_WITH_AS(with(yaml, {{"FLASHREC_YIELD_WHEN_IDLE", "1"}}),
                         doctest::Contains("FLASHREC_YIELD_WHEN_IDLE must be one of auto, true, false"),
                         flashrec::ConfigError);
    CHECK_THROWS_WITH_AS(with(yaml, {{"FLASHREC_DETECTOR_PERIOD_MS", "0.2"}}),
                         doctest::Contains("whole number of milliseconds"), flashrec::ConfigError);
    // The override is checked against train.yaml's other value.
    CHECK_THROWS_WITH_AS(with(yaml, {{"FLASHREC_DETECTOR_PERIOD_MS", "1500"}}),
                         doctest::Contains(">= 2 * mpi.detector_period_ms = 3000"), flashrec::ConfigError);
}

TEST_CASE("mpi: what fr-mpirun is told") {
    config::Mpi mpi;
    mpi.transport = "auto";
    mpi.detector_period_ms = 100;
    mpi.detector_timeout_ms = 1000;
    const auto vars = config::wrapper_variables(mpi);
    REQUIRE(vars.size() == 5);
    CHECK(vars[0] == std::pair<std::string, std::string>{"FLASHREC_TRANSPORT", "auto"});
    CHECK(vars[1] == std::pair<std::string, std::string>{"FLASHREC_DETECTOR", "off"});
    CHECK(vars[2] == std::pair<std::string, std::string>{"FLASHREC_DETECTOR_PERIOD_MS", "100"});
    CHECK(vars[3] == std::pair<std::string, std::string>{"FLASHREC_DETECTOR_TIMEOUT_MS", "1000"});
    CHECK(vars[4] == std::pair<std::string, std::string>{"FLASHREC_YIELD_WHEN_IDLE", "auto"});
    mpi.detector = true;
    mpi.yield_when_idle = "true";
    CHECK(config::wrapper_variables(mpi)[1].second == "on");
    CHECK(config::wrapper_variables(mpi)[4].second == "true");
}

TEST_CASE("progress ticker: only for the in-band detector without its own thread") {
    CHECK_FALSE(ticker_interval(InBandDetector{}));
    CHECK_FALSE(ticker_interval(InBandDetector{.on = true, .own_thread = true, .period_s = 0.2, .timeout_s = 2}));
    CHECK(ticker_interval(InBandDetector{.on = true, .own_thread = false, .period_s = 0.2, .timeout_s = 2}) == 50ms);
    CHECK(ticker_interval(InBandDetector{.on = true, .period_s = 3.0}) == 750ms);
    CHECK(ticker_interval(InBandDetector{.on = true, .period_s = 0.001}) == 1ms);  // never 0: no busy loop
    CHECK(ticker_interval(InBandDetector{.on = true, .period_s = 0}) == 50ms);      // unreadable period
}

TEST_CASE("detector mismatch: said only when the job asked for the detector") {
    using flashrec::ft::detector_mismatch;
    CHECK_FALSE(detector_mismatch(false, InBandDetector{}));
    CHECK_FALSE(detector_mismatch(false, InBandDetector{.on = true, .own_thread = true}));
    CHECK_FALSE(detector_mismatch(true, InBandDetector{.on = true, .period_s = 0.2, .timeout_s = 2}));
    CHECK(detector_mismatch(true, InBandDetector{})->find("mpi.detector asks") != std::string::npos);
    CHECK(detector_mismatch(true, InBandDetector{.on = true, .own_thread = true})->find("trap 11") != std::string::npos);
}

TEST_CASE("exit notices: without a PMIx client they say why, and shared memory without them is named") {
    // No MPI_Init here: the process has MPI's PMIx library loaded but no PMIx client running.
    const flashrec::ft::ExitNotices notices;
    CHECK_FALSE(notices.active());
    REQUIRE(notices.unavailable());
    CHECK_FALSE(notices.unavailable()->empty());
    using flashrec::ft::exits_unseen;
    CHECK_FALSE(exits_unseen(false, false, notices));  // tcp: the closed socket reports the exit
    CHECK_FALSE(exits_unseen(true, true, notices));    // the in-band detector does, later
    const auto problem = exits_unseen(true, false, notices);
    REQUIRE(problem);
    CHECK(problem->find(*notices.unavailable()) != std::string::npos);
    CHECK(problem->find("trap 1") != std::string::npos);
}

TEST_CASE("exit notices: only a PMIx of stable ABI 4 or 5 gets them (their structs are PMIx 4.2's)") {
    using flashrec::ft::pmix_abi_mismatch;
    CHECK_FALSE(pmix_abi_mismatch("OpenPMIx 5.0.10 (PMIx Standard: 5.1, Stable ABI: 5.0, Provisional ABI: 5.0)"));
    CHECK_FALSE(pmix_abi_mismatch("OpenPMIx 4.2.2 (PMIx Standard: 4.2, Stable ABI: 4.2, Provisional ABI: 4.2)"));
    const auto future = pmix_abi_mismatch("OpenPMIx 6.0.0 (PMIx Standard: 6.0, Stable ABI: 6.0, Provisional ABI: 6.0)");
    REQUIRE(future);
    CHECK(future->find("'OpenPMIx 6.0.0") != std::string::npos);
    CHECK(pmix_abi_mismatch("OpenPMIx 3.2.3"));  // no stable ABI named: not known to fit
    CHECK(pmix_abi_mismatch("Stable ABI: x"));
}
