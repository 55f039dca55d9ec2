// Stands first on the core's include path (launcher/CMakeLists.txt): the launcher's core is pure
// (docs/launcher.md, "Structure"), so <boost/asio.hpp> there is a build error. Threads, processes, files and
// MPI belong in shell/, os/, control/ or plan/.
#error "launcher core: <boost/asio.hpp> is I/O; the core gets its facts as inputs and returns effects"
