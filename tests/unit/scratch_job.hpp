// A job name no other test or process uses (this process's id and a counter); its snapshot
// segments are removed however the test ends. Shared by the unit and gpu tests.
#pragma once
#include <unistd.h>

#include <string>

#include "flashrec/ft/snapshot.hpp"

namespace flashrec::test {

class ScratchJob {
public:
    ScratchJob() : name_("t" + std::to_string(::getpid()) + "-" + std::to_string(++counter_)) {}
    ScratchJob(const ScratchJob&) = delete;
    ScratchJob& operator=(const ScratchJob&) = delete;
    ~ScratchJob() {
        try {
            ft::remove_all(name_);
        } catch (...) {  // never throw from a destructor; a leftover shows in the next test
        }
    }
    const std::string& name() const { return name_; }

private:
    static inline int counter_ = 0;
    std::string name_;
};

}  // namespace flashrec::test
