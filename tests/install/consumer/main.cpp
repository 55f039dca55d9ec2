// An outside trainer: only the installed public header and flashrec::flashrec.
#include <flashrec/flashrec.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
    flashrec::Runtime rt(argc, argv);
    std::vector<float> weights(64, 1.0f), grads(64);
    rt.protect("weights", std::span(weights), flashrec::Redundancy::replicated);
    for (auto step : rt.steps()) {
        for (auto& g : grads) g = 0.5f;
        step.allreduce(grads);
        step.update([&] {
            for (std::size_t i = 0; i < weights.size(); ++i) weights[i] -= 0.1f * grads[i];
        });
    }
    const std::string checksum = rt.state_checksum();
    if (rt.is_leader())
        std::printf("consumer: flashrec %s linked, %d ranks, %lld steps, weights[0]=%g, state %s\n",
                    flashrec::version(), rt.dp_size(), static_cast<long long>(rt.total_steps()),
                    static_cast<double>(weights[0]), checksum.c_str());
    if (rt.is_leader()) std::printf("final_checksum=%s\n", checksum.c_str());  // compared across runs
}
