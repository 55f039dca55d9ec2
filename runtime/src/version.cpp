#include "flashrec/flashrec.hpp"

namespace flashrec {
const char* version() { return "0.1.0"; }
}  // namespace flashrec
