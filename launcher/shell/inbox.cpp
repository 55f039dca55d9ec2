#include "inbox.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "flashrec/errors.hpp"

namespace flashrec::launcher {

Inbox::Inbox() : wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (!wake_.open()) throw Error(std::string("eventfd: ") + std::strerror(errno));
}

void Inbox::push(Queued queued) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(queued));
    }
    const std::uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
}

std::deque<Queued> Inbox::take() {
    std::uint64_t count = 0;
    (void)!::read(wake_.get(), &count, sizeof count);
    std::deque<Queued> batch;
    std::lock_guard lock(mutex_);
    batch.swap(queue_);
    return batch;
}

}  // namespace flashrec::launcher
