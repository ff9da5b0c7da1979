/* Linked into the MPI rank executables (trainscope-testjob, trainscope-train) of the ASan
 * presets only (TRAINSCOPE_ASAN_RANK_DEFAULTS, CMakePresets.json); never into a normal build.
 *
 * Open MPI dlcloses its components at MPI_Finalize, so at exit LeakSanitizer cannot name the
 * module of what they allocated and kept ("<unknown module>"): only a slow (DWARF) unwind at
 * each malloc reaches a frame in libmpi/libopen-pal that tests/sanitizers/lsan.supp can match.
 * That unwind makes every allocation many times slower, which the GUI and analysis suites cannot
 * afford (tst_gui_knobs timed out after 300 s with it), so the ranks alone take it. ASAN_OPTIONS
 * in the environment still overrides this default. */
const char* __asan_default_options(void);
const char* __asan_default_options(void) { return "fast_unwind_on_malloc=0"; }
