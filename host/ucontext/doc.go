// Package ucontext serves the kernel's uverbs write() ABI in user space, on the engine: one
// Context is what a program's open /dev/infiniband/uverbsN is to the kernel (its ucontext),
// holding the objects the program made (PDs, MRs, MWs, CQs, QPs, SRQs, AHs) and running the
// commands rdma-core's rxe provider and libibverbs write, with the kernel's errnos where it
// would refuse.
//
// Queues are rings in rxe's layout (rdma/rdma_user_rxe.h) in a memfd that is also the
// program's command file: the provider maps them with mmap(cmd_fd, offset) as it does with the
// kernel, and Context maps the same pages. A program's MRs are its own memory, reached by
// copying (a keys.Copier over process_vm_readv and process_vm_writev): nothing is pinned, and
// memory the program unmaps after registering fails the work that reaches it.
//
// Context knows no sockets: what a command writes back into the program (its response, the
// numbers of the files it creates) comes back as a Reply for whoever carries it (host/daemon).
package ucontext
