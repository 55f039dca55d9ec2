// The one way a record's fields are described and written: a field table per record type
// (name in the JSON, member, presence), from which the record's JSON object is built field by
// field in the table's order. The ranks' records (records.cpp, which also reads them back) and
// the launcher's own event-log records (launcher/core/launcher_records.cpp) are both written from
// it, so no record spells a field twice. Internal: not part of the public flashrec.hpp.
#pragma once
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace flashrec::ft::records {

enum class Presence {
    required,  // always written; a record without it is refused
    optional,  // a std::optional written when set, or a plain member added after the record's
               // first version; absent or null when read: the member keeps its default
    nullable,  // a std::optional always written, null when unset (or, for a number, not finite)
};
inline constexpr auto kOptional = Presence::optional;
inline constexpr auto kNullable = Presence::nullable;

// One field: its name in the JSON, the member it is, its presence.
template <class R, class T>
struct FieldSpec {
    const char* name;
    T R::*member;
    Presence presence = Presence::required;
};
template <class R, class T>
FieldSpec(const char*, T R::*) -> FieldSpec<R, T>;
template <class R, class T>
FieldSpec(const char*, T R::*, Presence) -> FieldSpec<R, T>;

// A member whose own fields are written into the record beside the others, not as an object of
// their own (two records that share most fields keep them in one struct).
template <class R, class T>
struct Inline {
    T R::*member;
};
template <class R, class T>
Inline(T R::*) -> Inline<R, T>;

// Table<R>::fields: a tuple of FieldSpec<R, ...> (and Inline<R, ...>), specialized per record
// type in this namespace.
template <class R>
struct Table;

template <class T>
concept Tabled = requires { Table<T>::fields; };

template <class R>
void write_fields(const R& record, nlohmann::json& j);

template <class T>
nlohmann::json to_value(const T& v) {
    if constexpr (Tabled<T>) {
        nlohmann::json out = nlohmann::json::object();
        write_fields(v, out);
        return out;
    } else {
        return nlohmann::json(v);
    }
}
// A list of records of their own (a table each): an array of objects.
template <Tabled T>
nlohmann::json to_value(const std::vector<T>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : list) out.push_back(to_value(e));
    return out;
}

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

template <class R, class T>
void put(nlohmann::json& j, const R& record, const FieldSpec<R, T>& f) {
    const T& v = record.*f.member;
    if constexpr (IsOptional<T>::value) {
        bool set = v.has_value();
        if constexpr (std::is_floating_point_v<typename T::value_type>) set = set && std::isfinite(*v);
        if (f.presence == Presence::nullable)
            j[f.name] = set ? to_value(*v) : nlohmann::json(nullptr);
        else if (v)
            j[f.name] = to_value(*v);
    } else {
        j[f.name] = to_value(v);
    }
}
template <class R, class T>
void put(nlohmann::json& j, const R& record, const Inline<R, T>& f) {
    write_fields(record.*f.member, j);
}

template <class R>
void write_fields(const R& record, nlohmann::json& j) {
    std::apply([&](const auto&... f) { (put(j, record, f), ...); }, Table<R>::fields);
}

}  // namespace flashrec::ft::records
