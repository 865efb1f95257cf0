"""Process tools of the local runtime, below everything else in it: no child outlives its parent
(``lifeline``: the parent-death signal, the supervisor of a step's process group, a process's start time), and
fault injection for the resilience tests (``faults``: kill a replica on a line, find processes by a variable)."""
