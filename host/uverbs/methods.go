package uverbs

// The write() commands (enum ib_uverbs_write_cmds in include/uapi/rdma/ib_user_verbs.h).
const (
	CmdGetContext        = 0
	CmdQueryDevice       = 1
	CmdQueryPort         = 2
	CmdAllocPD           = 3
	CmdDeallocPD         = 4
	CmdCreateAH          = 5
	CmdDestroyAH         = 8
	CmdRegMR             = 9
	CmdReregMR           = 11
	CmdDeregMR           = 13
	CmdAllocMW           = 14
	CmdDeallocMW         = 16
	CmdCreateCompChannel = 17
	CmdCreateCQ          = 18
	CmdResizeCQ          = 19
	CmdDestroyCQ         = 20
	CmdPollCQ            = 21
	CmdReqNotifyCQ       = 23
	CmdCreateQP          = 24
	CmdQueryQP           = 25
	CmdModifyQP          = 26
	CmdDestroyQP         = 27
	CmdPostSend          = 28
	CmdPostRecv          = 29
	CmdAttachMcast       = 30
	CmdDetachMcast       = 31
	CmdCreateSRQ         = 32
	CmdModifySRQ         = 33
	CmdQuerySRQ          = 34
	CmdDestroySRQ        = 35
	CmdPostSRQRecv       = 36
	CmdCreateXSRQ        = 39

	// Extended commands carry this flag with their number.
	FlagExtended       = 0x80000000
	CmdExQueryDevice   = FlagExtended | 1
	CmdExCreateCQ      = FlagExtended | 18
	CmdExCreateQP      = FlagExtended | 24
	CmdExModifyQP      = FlagExtended | 26
	numLegacyMethods   = 41 // OPEN_QP (40) is the last legacy command the kernel defines
	numExtendedMethods = 58 // EX_MODIFY_CQ (57) is the last extended one
)

// Method is what the kernel knows of a command before it runs it: the size of its core request
// (after the header) and of its core response, and whether driver data follows the core on
// either side (the kernel's has_udata). Extended commands count their sizes to the end of the
// last member the kernel reads, not the struct's size.
type Method struct {
	Name     string
	Req      int
	Resp     int
	Udata    bool
	reqC     string // the C struct of the request, for the test that checks these sizes
	respC    string
	lastReq  string // extended: the last request member the kernel reads
	lastResp string
}

// methods are the commands softirdma knows, with the kernel's sizes (uverbs_cmd.c's
// uverbs_def_write_intf): every one the rxe provider can make libibverbs write, and those a
// program may send by hand that the kernel would refuse as rxe's (REREG_MR, the posts).
var methods = map[uint32]Method{
	CmdGetContext:        {"GET_CONTEXT", 8, 8, true, "ib_uverbs_get_context", "ib_uverbs_get_context_resp", "", ""},
	CmdQueryDevice:       {"QUERY_DEVICE", 8, 176, false, "ib_uverbs_query_device", "ib_uverbs_query_device_resp", "", ""},
	CmdQueryPort:         {"QUERY_PORT", 16, 40, false, "ib_uverbs_query_port", "ib_uverbs_query_port_resp", "", ""},
	CmdAllocPD:           {"ALLOC_PD", 8, 4, true, "ib_uverbs_alloc_pd", "ib_uverbs_alloc_pd_resp", "", ""},
	CmdDeallocPD:         {"DEALLOC_PD", 4, 0, false, "ib_uverbs_dealloc_pd", "", "", ""},
	CmdCreateAH:          {"CREATE_AH", 56, 4, true, "ib_uverbs_create_ah", "ib_uverbs_create_ah_resp", "", ""},
	CmdDestroyAH:         {"DESTROY_AH", 4, 0, false, "ib_uverbs_destroy_ah", "", "", ""},
	CmdRegMR:             {"REG_MR", 40, 12, true, "ib_uverbs_reg_mr", "ib_uverbs_reg_mr_resp", "", ""},
	CmdReregMR:           {"REREG_MR", 48, 8, true, "ib_uverbs_rereg_mr", "ib_uverbs_rereg_mr_resp", "", ""},
	CmdDeregMR:           {"DEREG_MR", 4, 0, false, "ib_uverbs_dereg_mr", "", "", ""},
	CmdAllocMW:           {"ALLOC_MW", 16, 8, true, "ib_uverbs_alloc_mw", "ib_uverbs_alloc_mw_resp", "", ""},
	CmdDeallocMW:         {"DEALLOC_MW", 4, 0, false, "ib_uverbs_dealloc_mw", "", "", ""},
	CmdCreateCompChannel: {"CREATE_COMP_CHANNEL", 8, 4, false, "ib_uverbs_create_comp_channel", "ib_uverbs_create_comp_channel_resp", "", ""},
	CmdCreateCQ:          {"CREATE_CQ", 32, 8, true, "ib_uverbs_create_cq", "ib_uverbs_create_cq_resp", "", ""},
	CmdResizeCQ:          {"RESIZE_CQ", 16, 8, true, "ib_uverbs_resize_cq", "ib_uverbs_resize_cq_resp", "", ""},
	CmdDestroyCQ:         {"DESTROY_CQ", 16, 8, false, "ib_uverbs_destroy_cq", "ib_uverbs_destroy_cq_resp", "", ""},
	CmdPollCQ:            {"POLL_CQ", 16, 8, false, "ib_uverbs_poll_cq", "ib_uverbs_poll_cq_resp", "", ""},
	CmdReqNotifyCQ:       {"REQ_NOTIFY_CQ", 8, 0, false, "ib_uverbs_req_notify_cq", "", "", ""},
	CmdCreateQP:          {"CREATE_QP", 56, 32, true, "ib_uverbs_create_qp", "ib_uverbs_create_qp_resp", "", ""},
	CmdQueryQP:           {"QUERY_QP", 16, 128, false, "ib_uverbs_query_qp", "ib_uverbs_query_qp_resp", "", ""},
	CmdModifyQP:          {"MODIFY_QP", 112, 0, false, "ib_uverbs_modify_qp", "", "", ""},
	CmdDestroyQP:         {"DESTROY_QP", 16, 4, false, "ib_uverbs_destroy_qp", "ib_uverbs_destroy_qp_resp", "", ""},
	CmdPostSend:          {"POST_SEND", 24, 4, false, "ib_uverbs_post_send", "ib_uverbs_post_send_resp", "", ""},
	CmdPostRecv:          {"POST_RECV", 24, 4, false, "ib_uverbs_post_recv", "ib_uverbs_post_recv_resp", "", ""},
	CmdAttachMcast:       {"ATTACH_MCAST", 24, 0, false, "ib_uverbs_attach_mcast", "", "", ""},
	CmdDetachMcast:       {"DETACH_MCAST", 24, 0, false, "ib_uverbs_detach_mcast", "", "", ""},
	CmdCreateSRQ:         {"CREATE_SRQ", 32, 16, true, "ib_uverbs_create_srq", "ib_uverbs_create_srq_resp", "", ""},
	CmdModifySRQ:         {"MODIFY_SRQ", 16, 0, true, "ib_uverbs_modify_srq", "", "", ""},
	CmdQuerySRQ:          {"QUERY_SRQ", 16, 16, false, "ib_uverbs_query_srq", "ib_uverbs_query_srq_resp", "", ""},
	CmdDestroySRQ:        {"DESTROY_SRQ", 16, 4, false, "ib_uverbs_destroy_srq", "ib_uverbs_destroy_srq_resp", "", ""},
	CmdPostSRQRecv:       {"POST_SRQ_RECV", 24, 4, false, "ib_uverbs_post_srq_recv", "ib_uverbs_post_srq_recv_resp", "", ""},
	CmdCreateXSRQ:        {"CREATE_XSRQ", 48, 16, true, "ib_uverbs_create_xsrq", "ib_uverbs_create_srq_resp", "", ""},

	CmdExQueryDevice: {"EX_QUERY_DEVICE", 8, 184, false, "ib_uverbs_ex_query_device", "ib_uverbs_ex_query_device_resp", "reserved", "response_length"},
	CmdExCreateCQ:    {"EX_CREATE_CQ", 32, 16, false, "ib_uverbs_ex_create_cq", "ib_uverbs_ex_create_cq_resp", "reserved", "response_length"},
	CmdExCreateQP:    {"EX_CREATE_QP", 52, 40, false, "ib_uverbs_ex_create_qp", "ib_uverbs_ex_create_qp_resp", "comp_mask", "response_length"},
	CmdExModifyQP:    {"EX_MODIFY_QP", 112, 8, false, "ib_uverbs_ex_modify_qp", "ib_uverbs_ex_modify_qp_resp", "base", "response_length"},
}
