"""Running a loaded graph: methods, their calls, the recorded command buffer.

Modules: method (`Method`: one graph, called; `LoadedMethod`, the interface every method declares;
`Tail`, the one way to extend a method by a tail graph), plan (`PlanMethod`: an ExecuTorch execution
plan run instruction by instruction; `PlanLoad`, its delegates' programs), ports (a call's inputs and
outputs: checked and copied), record (the execute command buffer, recorded once, replayed on every
call), hazards (where that buffer needs a barrier), kernels (a plan's CPU ops bound to torch: the
loader's only use of torch).
"""
