// The example MLP's parameters as one flat float array, shared by the CPU and CUDA trainers
// (same layout, so the two can be compared).
#pragma once
#include <cstddef>

namespace mlp {

struct Shape {
    std::size_t in, hidden, out;
    std::size_t w1() const { return 0; }
    std::size_t b1() const { return hidden * in; }
    std::size_t w2() const { return b1() + hidden; }
    std::size_t b2() const { return w2() + out * hidden; }
    std::size_t size() const { return b2() + out; }
};

}  // namespace mlp
