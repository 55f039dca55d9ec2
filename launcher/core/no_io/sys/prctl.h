// Stands first on the core's include path (launcher/CMakeLists.txt): the launcher's core is pure
// (docs/launcher.md, "Structure"), so <sys/prctl.h> there is a build error. Threads, processes, files and
// MPI belong in shell/, os/, control/ or plan/.
#error "launcher core: <sys/prctl.h> is I/O; the core gets its facts as inputs and returns effects"
