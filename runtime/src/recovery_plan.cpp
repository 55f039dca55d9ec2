#include "flashrec/runtime/recovery_plan.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "flashrec/errors.hpp"

namespace flashrec::recovery {

std::string serialize(const Report& r) {
    std::ostringstream out;
    out << r.role << ' ' << r.node << ' ' << r.id << ' ' << r.step << ' ' << r.has_replicated << ' '
        << r.own.newest << ' ' << r.own.older << ' ' << r.held.size();
    for (const auto& h : r.held)
        out << ' ' << h.owner_role << ' ' << h.versions.newest << ' ' << h.versions.older;
    out << ' ' << r.pristine << ' ' << r.local.size();
    for (const auto& l : r.local) out << ' ' << l.owner_role << ' ' << l.versions.newest << ' ' << l.versions.older;
    // Last: the reason is free text, the rest of the line.
    std::string unhealthy = r.unhealthy;
    for (char& c : unhealthy)
        if (c == '\n') c = ' ';
    out << ' ' << r.shm_need << ' ' << r.shm_room << ' ' << r.slot << ' ' << unhealthy;
    return out.str();
}

Report deserialize(const std::string& text) {
    std::istringstream in(text);
    Report r;
    size_t held = 0;
    in >> r.role >> r.node >> r.id >> r.step >> r.has_replicated >> r.own.newest >> r.own.older >>
        held;
    if (!in || held > 4096) throw Error("recovery: malformed report '" + text + "'");
    r.held.resize(held);
    for (auto& h : r.held) in >> h.owner_role >> h.versions.newest >> h.versions.older;
    size_t local = 0;
    in >> r.pristine >> local;
    if (!in || local > 4096) throw Error("recovery: malformed report '" + text + "'");
    r.local.resize(local);
    for (auto& l : r.local) in >> l.owner_role >> l.versions.newest >> l.versions.older;
    in >> r.shm_need >> r.shm_room >> r.slot;
    if (!in) throw Error("recovery: malformed report '" + text + "'");
    std::getline(in, r.unhealthy);
    if (!r.unhealthy.empty() && r.unhealthy.front() == ' ') r.unhealthy.erase(0, 1);
    return r;
}

std::vector<int> slots_after(const std::vector<Report>& reports, const std::vector<int>& role_of_process,
                             int n_roles) {
    std::vector<int> slot_of_role(static_cast<size_t>(n_roles), -1);
    // Slots taken on each node: live roles keep theirs, spares that stay spares keep their own.
    std::map<std::string, std::set<int>> taken;
    for (size_t p = 0; p < reports.size(); ++p) {
        const int role = role_of_process[p];
        const bool kept = role >= 0 && role == reports[p].role;
        if ((kept || role < 0) && reports[p].slot >= 0) taken[reports[p].node].insert(reports[p].slot);
        if (kept) slot_of_role[static_cast<size_t>(role)] = reports[p].slot;
    }
    // Replacements in role order, each the lowest free slot of its node.
    std::vector<size_t> replacements;
    for (size_t p = 0; p < reports.size(); ++p)
        if (role_of_process[p] >= 0 && role_of_process[p] != reports[p].role) replacements.push_back(p);
    std::sort(replacements.begin(), replacements.end(),
              [&](size_t a, size_t b) { return role_of_process[a] < role_of_process[b]; });
    for (size_t p : replacements) {
        std::set<int>& used = taken[reports[p].node];
        int slot = 0;
        while (used.count(slot) != 0) ++slot;
        used.insert(slot);
        slot_of_role[static_cast<size_t>(role_of_process[p])] = slot;
    }
    return slot_of_role;
}

std::string admission_problem(const Report& spare, std::int64_t need) {
    if (!spare.unhealthy.empty()) return spare.unhealthy;
    if (spare.shm_room >= 0 && spare.shm_room < need)
        return "/dev/shm on " + spare.node + " can give " + std::to_string(spare.shm_room) +
               " bytes, the role's snapshot slots need " + std::to_string(need);
    return {};
}

std::int64_t shm_need(const std::vector<Report>& reports) {
    std::int64_t need = 0;
    for (const auto& r : reports)
        if (r.role >= 0) need = std::max(need, r.shm_need);
    return need;
}

int admissible_spares(const std::vector<Report>& reports) {
    const std::int64_t need = shm_need(reports);
    int n = 0;
    for (const auto& r : reports)
        if (r.role < 0 && admission_problem(r, need).empty()) ++n;
    return n;
}

Plan plan_repair(const topology::Shape& shape, const std::vector<Report>& reports, Mode mode) {
    Plan plan;
    bool has_replicated = false;
    std::int64_t furthest_step = -1;
    for (const auto& rep : reports) {
        has_replicated = has_replicated || rep.has_replicated;
        furthest_step = std::max(furthest_step, rep.step);
    }
    plan.furthest_step = furthest_step;
    const int n_roles = shape.size();
    std::vector<int> process_of(static_cast<size_t>(n_roles), -1);  // live process per role
    for (size_t p = 0; p < reports.size(); ++p)
        if (reports[p].role >= 0) process_of[static_cast<size_t>(reports[p].role)] = static_cast<int>(p);
    std::vector<int> spares;
    for (size_t p = 0; p < reports.size(); ++p)
        if (reports[p].role < 0) spares.push_back(static_cast<int>(p));
    std::sort(spares.begin(), spares.end(),
              [&](int a, int b) { return reports[static_cast<size_t>(a)].id < reports[static_cast<size_t>(b)].id; });

    plan.role_of_process.resize(reports.size());
    for (size_t p = 0; p < reports.size(); ++p) plan.role_of_process[p] = reports[p].role;
    // Spares in id order, each admitted only after its health check (admission_problem): one
    // that fails is passed over for the next, on every process alike (the reports are the same).
    std::size_t next_spare = 0;
    const std::int64_t need = shm_need(reports);
    auto admit_next = [&]() -> int {
        while (next_spare < spares.size()) {
            const int p = spares[next_spare++];
            std::string why = admission_problem(reports[static_cast<size_t>(p)], need);
            if (why.empty()) return p;
            plan.rejected_spares.push_back({p, std::move(why)});
        }
        return -1;
    };
    std::vector<int> spare_for(static_cast<size_t>(n_roles), -1);
    for (int r = 0; r < n_roles; ++r) {
        if (process_of[static_cast<size_t>(r)] >= 0) continue;
        plan.dead_roles.push_back(r);
        if (const int p = admit_next(); p >= 0) {
            spare_for[static_cast<size_t>(r)] = p;
            plan.role_of_process[static_cast<size_t>(p)] = r;
        } else {
            ++plan.missing_spares;
        }
    }

    // Node ids by name, in report order: only equality matters (ring placement).
    std::map<std::string, int> node_id;
    for (const auto& rep : reports) node_id.emplace(rep.node, static_cast<int>(node_id.size()));
    plan.node_of_role.assign(static_cast<size_t>(n_roles), -1);
    for (size_t p = 0; p < reports.size(); ++p)
        if (plan.role_of_process[p] >= 0)
            plan.node_of_role[static_cast<size_t>(plan.role_of_process[p])] = node_id[reports[p].node];
    plan.slot_of_role = slots_after(reports, plan.role_of_process, n_roles);

    // Whether role r's live process restores version v from its own snapshot. In-job, a live
    // role with any snapshot does (its snapshots are current); one with none lacks every version
    // (below). In a warm relaunch, one with no snapshot at all (the relaunch put it on a new
    // node) is restored in place. A warm relaunch also restores in place a role
    // whose own snapshots lack v: what this node holds under its name may be the stale segments
    // of a process that died before the role moved elsewhere (issue 15, case 3).
    auto keeps_own = [&](int r, std::int64_t v) {
        const int p = process_of[static_cast<size_t>(r)];
        if (p < 0) return false;
        const auto& own = reports[static_cast<size_t>(p)].own;
        if (own.newest < 0) return false;
        return mode == Mode::in_job || own.has(v);
    };
    // Sources of version v are roles that keep their own state at v (they run the sending side).
    auto dp_peers_with = [&](int role, std::int64_t v) {
        std::vector<int> peers;
        const auto c = topology::coord_of(shape, role);
        for (int d = 0; d < shape.dp; ++d) {
            auto pc = c;
            pc.dp = d;
            const int pr = topology::role_index(shape, pc);
            if (pr != role && keeps_own(pr, v) &&
                reports[static_cast<size_t>(process_of[static_cast<size_t>(pr)])].own.has(v))
                peers.push_back(pr);
        }
        return peers;
    };
    auto holders_with = [&](int role, std::int64_t v) {
        std::vector<int> holders;
        for (size_t p = 0; p < reports.size(); ++p) {
            const int holder = reports[p].role;
            if (holder < 0 || holder == role || !keeps_own(holder, v)) continue;
            for (const auto& h : reports[p].held)
                if (h.owner_role == role && h.versions.has(v)) holders.push_back(holder);
        }
        return holders;
    };
    // In-job only: live processes on a dead role's node that can read its own snapshot there
    // (a warm relaunch puts the role's new process on that node, which then reads it as its own).
    auto local_holders_with = [&](int role, std::int64_t v) {
        std::vector<int> holders;
        if (mode != Mode::in_job || process_of[static_cast<size_t>(role)] >= 0) return holders;
        for (size_t p = 0; p < reports.size(); ++p) {
            const int holder = reports[p].role;
            if (holder < 0 || !keeps_own(holder, v)) continue;
            for (const auto& l : reports[p].local)
                if (l.owner_role == role && l.versions.has(v)) holders.push_back(holder);
        }
        return holders;
    };
    std::set<std::int64_t, std::greater<>> candidates;
    for (const auto& rep : reports) {
        for (auto v : {rep.own.newest, rep.own.older})
            if (v >= 0) candidates.insert(v);
        if (mode == Mode::relaunch)
            for (const auto& h : rep.held)
                for (auto v : {h.versions.newest, h.versions.older})
                    if (v >= 0) candidates.insert(v);
    }
    std::string tried;  // per candidate, the first role that lacks it (most recent first)
    for (std::int64_t v : candidates) {
        std::string missing;
        int lacking = -1;
        for (int r = 0; r < n_roles && lacking < 0; ++r) {
            if (keeps_own(r, v)) {
                if (!reports[static_cast<size_t>(process_of[static_cast<size_t>(r)])].own.has(v)) {
                    lacking = r;
                    missing = "its own snapshot";
                }
            } else if (mode == Mode::in_job && process_of[static_cast<size_t>(r)] >= 0) {
                // In-job a live process restores only from its own snapshots (restore_and_serve). It
                // has none when a failure cut short the protection of the first version before
                // its own copy committed, though a ring holder's copy of it may have: then no
                // version is complete, and if nobody changed state yet the plan is the initial one.
                lacking = r;
                missing = "its live process has no committed snapshot of its own, and in-job a live "
                          "process restores only from its own";
            } else if ((holders_with(r, v).empty() && local_holders_with(r, v).empty()) ||
                       (has_replicated && dp_peers_with(r, v).empty())) {
                lacking = r;
                missing = process_of[static_cast<size_t>(r)] < 0
                              ? "its owner died and no live replica, DP peer or process on its node has it"
                              : "neither its own snapshots here nor a live replica or DP peer have it";
            }
        }
        if (lacking >= 0) {
            tried += std::string(tried.empty() ? "" : "; ") + "version " + std::to_string(v) + ": role " +
                     topology::role_key(topology::coord_of(shape, lacking)) + " lacks it (" + missing + ")";
            continue;
        }
        plan.version = v;
        // Version v is the state after v steps; a process in step s had completed s of them.
        plan.steps_replayed = std::max<std::int64_t>(0, furthest_step - v);
        for (int r = 0; r < n_roles; ++r) {
            if (keeps_own(r, v)) continue;
            const int p = process_of[static_cast<size_t>(r)] >= 0 ? process_of[static_cast<size_t>(r)]
                                                                  : spare_for[static_cast<size_t>(r)];
            if (p < 0) continue;  // no spare: counted in missing_spares
            const auto ring = holders_with(r, v);
            Replacement rep{r, p, -1, ring.empty() ? local_holders_with(r, v).front() : ring.front(), ring.empty()};
            if (has_replicated) rep.replicated_from = dp_peers_with(r, v).front();
            plan.replacements.push_back(rep);
        }
        break;
    }
    if (plan.version < 0) {
        // Roles without a live process still get their spare (the caller falls back to HDF5).
        for (int r : plan.dead_roles)
            if (spare_for[static_cast<size_t>(r)] >= 0)
                plan.replacements.push_back({r, spare_for[static_cast<size_t>(r)], -1, -1, false});
        // In-place restores of a relaunch without a version: every live role lacking snapshots.
        for (int r = 0; r < n_roles; ++r) {
            const int p = process_of[static_cast<size_t>(r)];
            if (p >= 0 && reports[static_cast<size_t>(p)].own.newest < 0) plan.replacements.push_back({r, p, -1, -1, false});
        }
    }
    plan.problem = candidates.empty() ? "no process reported a committed snapshot"
                                      : "no version is complete for every role (" + tried + ")";
    if (plan.version >= 0) plan.problem.clear();
    bool all_pristine = true;
    for (const auto& rep : reports)
        if (rep.role >= 0) all_pristine = all_pristine && rep.pristine;
    if (plan.version < 0 && all_pristine) {
        // Nothing has changed state yet (ARCHITECTURE.md, "The step loop": the optimizer runs only after the version it
        // starts from is committed everywhere): start again from the initial state.
        plan.initial = true;
        // Live roles keep their state: only dead roles are replaced (by spares).
        std::erase_if(plan.replacements, [&](const Replacement& rep) {
            return reports[static_cast<size_t>(rep.process)].role >= 0;
        });
        plan.version = std::max<std::int64_t>(0, furthest_step);
        plan.steps_replayed = 0;
        plan.problem.clear();
        return plan;
    }
    if (plan.version < 0) {
        // Say what every live process could vouch for: an operator can see what was lost.
        plan.problem += "; what the live processes hold:";
        for (const auto& rep : reports) {
            if (rep.role < 0) continue;
            plan.problem += " " + topology::role_key(topology::coord_of(shape, rep.role)) + " own[" +
                            std::to_string(rep.own.newest) + "," + std::to_string(rep.own.older) + "]";
            for (const auto& h : rep.held)
                plan.problem += " copy-of-" + topology::role_key(topology::coord_of(shape, h.owner_role)) +
                                "[" + std::to_string(h.versions.newest) + "," +
                                std::to_string(h.versions.older) + "]";
        }
    }
    return plan;
}

RepairOutcome outcome_of(Plan plan, int process, int current_role, std::string replacement) {
    RepairOutcome o;
    o.role = plan.role_of_process.at(static_cast<std::size_t>(process));
    o.part = o.role < 0 ? Part::spare : current_role < 0 ? Part::recovered : Part::survivor;
    o.tier = plan.from_checkpoint ? 3 : 1;
    o.replacement = std::move(replacement);
    o.plan = std::move(plan);
    return o;
}

}  // namespace flashrec::recovery
