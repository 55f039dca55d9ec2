#include "flashrec/ft/h5.hpp"

#include <algorithm>

namespace flashrec::ft::h5 {
namespace {

constexpr hsize_t large_object_bytes = hsize_t{1} << 20;

herr_t append_frame(unsigned depth, const H5E_error2_t* frame, void* text_out) {
    auto& text = *static_cast<std::string*>(text_out);
    text += depth == 0 ? ": " : "; ";
    text += frame->func_name ? frame->func_name : "?";
    text += "(): ";
    text += frame->desc ? frame->desc : "";
    // The minor message is the specific cause ("file exists", "can't open object", ...).
    char minor[160];
    if (H5Eget_msg(frame->min_num, nullptr, minor, sizeof minor) > 0) {
        text += " (";
        text += minor;
        text += ")";
    }
    return 0;
}

// Accesses files with HDF5's file locking where the file system supports it, and without
// failing where it does not (some Lustre and NFS mounts).
PropertyList file_access_properties() {
    PropertyList access(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate(file access)"));
    check(H5Pset_file_locking(access.get(), true, true), "H5Pset_file_locking");
    return access;
}

Dataspace scalar_space() { return Dataspace(check(H5Screate(H5S_SCALAR), "H5Screate(scalar)")); }

void write_scalar(hid_t object, const char* name, hid_t file_type, hid_t memory_type,
                  const void* value) {
    report_errors_as_exceptions();
    const std::string operation = std::string("writing attribute '") + name + "'";
    Attribute attribute(check(
        H5Acreate2(object, name, file_type, scalar_space().get(), H5P_DEFAULT, H5P_DEFAULT),
        operation));
    check(H5Awrite(attribute.get(), memory_type, value), operation);
}

// Opens attribute `name` and makes sure it holds exactly one value, so that reading it into
// one variable cannot overflow.
Attribute open_scalar_attribute(hid_t object, const char* name, const std::string& operation) {
    report_errors_as_exceptions();
    Attribute attribute(check(H5Aopen(object, name, H5P_DEFAULT), operation));
    Dataspace space(check(H5Aget_space(attribute.get()), operation));
    if (check(H5Sget_simple_extent_npoints(space.get()), operation) != 1)
        throw Error(operation + ": not a single value");
    return attribute;
}

}  // namespace

void report_errors_as_exceptions() {
    thread_local bool done = false;
    if (!done) {
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        done = true;
    }
}

void throw_error_stack(std::string_view operation) {
    std::string text(operation);
    const std::size_t bare_length = text.size();
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, append_frame, &text);
    H5Eclear2(H5E_DEFAULT);
    if (text.size() == bare_length) text += ": failed (HDF5 left no error stack)";
    throw Error(text);
}

File create_file(const std::filesystem::path& path) {
    report_errors_as_exceptions();
    const std::string operation = "creating the file";
    PropertyList access = file_access_properties();
    check(H5Pset_alignment(access.get(), large_object_bytes, large_object_bytes), operation);
    return File(check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()), operation));
}

File open_file_read_only(const std::filesystem::path& path) {
    report_errors_as_exceptions();
    PropertyList access = file_access_properties();
    return File(check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()),
                      "opening the file"));
}

Dataset create_contiguous_dataset(hid_t file, const std::string& name, hid_t file_type,
                                  hsize_t elements) {
    report_errors_as_exceptions();
    const std::string operation = "creating dataset '" + name + "'";
    Dataspace space(check(H5Screate_simple(1, &elements, nullptr), operation));
    PropertyList creation(check(H5Pcreate(H5P_DATASET_CREATE), operation));
    check(H5Pset_layout(creation.get(), H5D_CONTIGUOUS), operation);
    // Every byte is written by the caller right after: filling first would write twice.
    check(H5Pset_fill_time(creation.get(), H5D_FILL_TIME_NEVER), operation);
    return Dataset(check(H5Dcreate2(file, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                                    creation.get(), H5P_DEFAULT),
                         operation));
}

bool has_link(hid_t file, const std::string& name) {
    report_errors_as_exceptions();
    return check(H5Lexists(file, name.c_str(), H5P_DEFAULT), "looking up '" + name + "'") > 0;
}

Dataset open_dataset(hid_t file, const std::string& name) {
    report_errors_as_exceptions();
    return Dataset(check(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "opening dataset '" + name + "'"));
}

Datatype type_of(hid_t dataset) {
    report_errors_as_exceptions();
    return Datatype(check(H5Dget_type(dataset), "H5Dget_type"));
}

hsize_t element_count_1d(hid_t dataset) {
    report_errors_as_exceptions();
    Dataspace space(check(H5Dget_space(dataset), "H5Dget_space"));
    const int rank = check(H5Sget_simple_extent_ndims(space.get()), "H5Sget_simple_extent_ndims");
    if (rank != 1) throw Error("dataset has " + std::to_string(rank) + " dimensions, expected 1");
    hsize_t elements = 0;
    check(H5Sget_simple_extent_dims(space.get(), &elements, nullptr), "H5Sget_simple_extent_dims");
    return elements;
}

hsize_t root_link_count(hid_t file) {
    report_errors_as_exceptions();
    H5G_info_t info{};
    check(H5Gget_info(file, &info), "H5Gget_info(/)");
    return info.nlinks;
}

void write_attribute(hid_t object, const char* name, std::int64_t value) {
    write_scalar(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_attribute(hid_t object, const char* name, std::uint64_t value) {
    write_scalar(object, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

void write_attribute(hid_t object, const char* name, std::string_view value) {
    report_errors_as_exceptions();
    // HDF5 has no zero-length fixed strings: an empty value is stored as one NUL.
    std::string padded(value);
    if (padded.empty()) padded.push_back('\0');
    Datatype type(check(H5Tcopy(H5T_C_S1), "H5Tcopy(H5T_C_S1)"));
    check(H5Tset_size(type.get(), padded.size()), "H5Tset_size");
    check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "H5Tset_strpad");
    write_scalar(object, name, type.get(), type.get(), padded.data());
}

template <>
std::int64_t read_attribute<std::int64_t>(hid_t object, const char* name) {
    const std::string operation = std::string("reading attribute '") + name + "'";
    Attribute attribute = open_scalar_attribute(object, name, operation);
    std::int64_t value = 0;
    check(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), operation);
    return value;
}

template <>
std::uint64_t read_attribute<std::uint64_t>(hid_t object, const char* name) {
    const std::string operation = std::string("reading attribute '") + name + "'";
    Attribute attribute = open_scalar_attribute(object, name, operation);
    std::uint64_t value = 0;
    check(H5Aread(attribute.get(), H5T_NATIVE_UINT64, &value), operation);
    return value;
}

template <>
std::string read_attribute<std::string>(hid_t object, const char* name) {
    const std::string operation = std::string("reading attribute '") + name + "'";
    Attribute attribute = open_scalar_attribute(object, name, operation);
    Datatype type(check(H5Aget_type(attribute.get()), operation));
    if (H5Tget_class(type.get()) != H5T_STRING || check(H5Tis_variable_str(type.get()), operation) > 0)
        throw Error(operation + ": not a fixed-length string");
    std::string value(H5Tget_size(type.get()), '\0');
    check(H5Aread(attribute.get(), type.get(), value.data()), operation);
    value.erase(std::find(value.begin(), value.end(), '\0'), value.end());
    return value;
}

}  // namespace flashrec::ft::h5
