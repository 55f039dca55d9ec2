// A thin RAII layer over HDF5's C API, in the manner of HighFive: every hid_t lives in a
// move-only Handle that closes it with the matching H5*close, and every failure becomes an
// h5::Error carrying HDF5's own error stack (automatic printing to stderr is turned off).
// Internal to the ft module: it includes <hdf5.h>, which public headers never do.
#pragma once
#include <hdf5.h>

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "flashrec/errors.hpp"

namespace flashrec::ft::h5 {

// An HDF5 call failed. what() reads "<operation>: <HDF5 error stack, outermost call first>".
// Operations name objects inside a file, not the file: callers add the file's path.
class Error : public flashrec::Error {
public:
    using flashrec::Error::Error;
};

// Turns HDF5's automatic error printing off for the calling thread (error stacks are
// per-thread in a thread-safe build), so that errors reach us only as exceptions. Cheap after
// the first call on a thread; every function below calls it.
void report_errors_as_exceptions();

// Throws h5::Error with the calling thread's error stack, then clears the stack.
[[noreturn]] void throw_error_stack(std::string_view operation);

// hid_t, herr_t and htri_t all signal failure with a negative value.
template <std::signed_integral Status>
Status check(Status status, std::string_view operation) {
    if (status < 0) throw_error_stack(operation);
    return status;
}

template <herr_t (*Close)(hid_t)>
class Handle {
public:
    Handle() = default;
    // Takes ownership of `id`, which must be valid: pass results through check() first.
    explicit Handle(hid_t id) noexcept : id_(id) {}
    Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
    Handle& operator=(Handle&& other) noexcept {
        if (this != &other) {
            release();
            id_ = std::exchange(other.id_, H5I_INVALID_HID);
        }
        return *this;
    }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { release(); }

    hid_t get() const noexcept { return id_; }

    // Closes now and throws if that fails: closing a file flushes it, and a failed flush must
    // not go unnoticed. The destructor closes quietly (it may run while unwinding).
    void close(std::string_view operation) {
        check(Close(std::exchange(id_, H5I_INVALID_HID)), operation);
    }

private:
    void release() noexcept {
        if (id_ >= 0) (void)Close(id_);
        id_ = H5I_INVALID_HID;
    }

    hid_t id_ = H5I_INVALID_HID;
};

using File = Handle<H5Fclose>;
using Dataset = Handle<H5Dclose>;
using Dataspace = Handle<H5Sclose>;
using Datatype = Handle<H5Tclose>;
using Attribute = Handle<H5Aclose>;
using PropertyList = Handle<H5Pclose>;

// Creates (truncating) a file for large sequential writes: objects of 1 MiB or more start on
// a 1 MiB boundary, a common parallel-file-system stripe size and a multiple of the page size.
File create_file(const std::filesystem::path& path);
File open_file_read_only(const std::filesystem::path& path);

// A 1-D dataset of `elements` values of `file_type`, stored contiguously (no chunking, no
// compression, no fill values written), so that one H5Dwrite is one large sequential write.
Dataset create_contiguous_dataset(hid_t file, const std::string& name, hid_t file_type,
                                  hsize_t elements);
bool has_link(hid_t file, const std::string& name);
Dataset open_dataset(hid_t file, const std::string& name);
Datatype type_of(hid_t dataset);
// Element count of a 1-D dataset; throws h5::Error for any other shape.
hsize_t element_count_1d(hid_t dataset);
// Number of links (here: datasets) in the root group.
hsize_t root_link_count(hid_t file);

// Scalar attributes. Strings are fixed-length ASCII, which h5dump prints plainly.
void write_attribute(hid_t object, const char* name, std::int64_t value);
void write_attribute(hid_t object, const char* name, std::uint64_t value);
void write_attribute(hid_t object, const char* name, std::string_view value);
// Defined for std::int64_t, std::uint64_t and std::string.
template <class T>
T read_attribute(hid_t object, const char* name);

}  // namespace flashrec::ft::h5
