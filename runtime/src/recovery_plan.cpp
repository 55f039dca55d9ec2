#include "flashrec/runtime/recovery_plan.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "flashrec/errors.hpp"

namespace flashrec::recovery {

std::string serialize(const Report& r) {
    std::ostringstream out;
    out << r.role << ' ' << r.node << ' ' << r.id << ' ' << r.step << ' ' << r.has_replicated << ' '
        << r.own.newest << ' ' << r.own.older << ' ' << r.held.size();
    for (const auto& h : r.held)
        out << ' ' << h.owner_role << ' ' << h.versions.newest << ' ' << h.versions.older;
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
    if (!in) throw Error("recovery: malformed report '" + text + "'");
    return r;
}

Plan make_plan(const topology::Shape& shape, const std::vector<Report>& reports) {
    Plan plan;
    bool has_replicated = false;
    std::int64_t furthest_step = -1;
    for (const auto& rep : reports) {
        has_replicated = has_replicated || rep.has_replicated;
        furthest_step = std::max(furthest_step, rep.step);
    }
    plan.furthest_step = furthest_step;
    const int n_roles = shape.size();
    std::vector<int> owner(static_cast<size_t>(n_roles), -1);  // process index per role
    for (size_t p = 0; p < reports.size(); ++p)
        if (reports[p].role >= 0) owner[static_cast<size_t>(reports[p].role)] = static_cast<int>(p);
    std::size_t used_spares = 0;
    std::vector<int> spares;
    for (size_t p = 0; p < reports.size(); ++p)
        if (reports[p].role < 0) spares.push_back(static_cast<int>(p));
    std::sort(spares.begin(), spares.end(),
              [&](int a, int b) { return reports[static_cast<size_t>(a)].id < reports[static_cast<size_t>(b)].id; });

    plan.role_of_process.resize(reports.size());
    for (size_t p = 0; p < reports.size(); ++p) plan.role_of_process[p] = reports[p].role;
    for (int r = 0; r < n_roles; ++r) {
        const int p = owner[static_cast<size_t>(r)];
        // A process that holds a role but none of its state (started anew by a warm relaunch on
        // a spare node) is restored like a replacement, in place.
        if (p >= 0 && reports[static_cast<size_t>(p)].own.newest < 0) {
            plan.replacements.push_back({r, p, -1, -1});
            owner[static_cast<size_t>(r)] = -1;
            continue;
        }
        if (p >= 0) continue;
        plan.dead_roles.push_back(r);
        if (used_spares < spares.size()) {
            const int spare = spares[used_spares++];
            plan.replacements.push_back({r, spare, -1, -1});
            plan.role_of_process[static_cast<size_t>(spare)] = r;
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

    // R = the newest version every role can be restored to.
    auto dp_peers_with = [&](int role, std::int64_t v) {
        std::vector<int> peers;
        const auto c = topology::coord_of(shape, role);
        for (int d = 0; d < shape.dp; ++d) {
            auto pc = c;
            pc.dp = d;
            const int pr = topology::role_index(shape, pc);
            const int p = owner[static_cast<size_t>(pr)];
            if (pr != role && p >= 0 && reports[static_cast<size_t>(p)].own.has(v)) peers.push_back(pr);
        }
        return peers;
    };
    auto holders_with = [&](int role, std::int64_t v) {
        std::vector<int> holders;
        for (size_t p = 0; p < reports.size(); ++p)
            for (const auto& h : reports[p].held)
                if (h.owner_role == role && h.versions.has(v) && reports[p].role >= 0)
                    holders.push_back(reports[p].role);
        return holders;
    };
    std::set<std::int64_t, std::greater<>> candidates;
    for (const auto& rep : reports) {
        for (auto v : {rep.own.newest, rep.own.older})
            if (v >= 0) candidates.insert(v);
    }
    for (std::int64_t v : candidates) {
        bool complete = true;
        std::string missing;
        for (int r = 0; r < n_roles && complete; ++r) {
            const int p = owner[static_cast<size_t>(r)];
            if (p >= 0) {
                complete = reports[static_cast<size_t>(p)].own.has(v);
                if (!complete) missing = "its own snapshot";
            } else {
                complete = !holders_with(r, v).empty() &&
                           (!has_replicated || !dp_peers_with(r, v).empty());
                if (!complete) missing = "its owner died and no live replica or DP peer has it";
            }
            if (!complete && plan.problem.empty())
                plan.problem = "role " + topology::role_key(topology::coord_of(shape, r)) +
                               " has no complete version " + std::to_string(v) + " (" + missing + ")";
        }
        if (!complete) continue;
        plan.version = v;
        plan.problem.clear();
        // Version v is the state after v steps; a process in step s had completed s of them.
        plan.steps_replayed = std::max<std::int64_t>(0, furthest_step - v);
        for (auto& rep : plan.replacements) {
            rep.payload_from = holders_with(rep.role, v).front();
            if (has_replicated) rep.replicated_from = dp_peers_with(rep.role, v).front();
        }
        break;
    }
    if (candidates.empty()) plan.problem = "no process reported a committed snapshot";
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

}  // namespace flashrec::recovery
