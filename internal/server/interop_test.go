package server_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"goinfer/internal/server/servertest"
	"goinfer/internal/tensor"
)

// TestGRPCReflectionClient does what grpcurl and other generic clients do:
// it learns the service from server reflection and calls ModelInfer with
// dynamic messages built from those descriptors alone.
func TestGRPCReflectionClient(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	conn := dialGRPC(t, s.GRPCAddr)
	ctx := ctxT(t)
	stream, err := grpc_reflection_v1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&grpc_reflection_v1.ServerReflectionRequest{
		MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "inference.GRPCInferenceService"},
	}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	fdr := r.GetFileDescriptorResponse()
	if fdr == nil {
		t.Fatalf("reflection answered %v", r)
	}
	var set descriptorpb.FileDescriptorSet
	for _, b := range fdr.FileDescriptorProto {
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(b, &fd); err != nil {
			t.Fatal(err)
		}
		set.File = append(set.File, &fd)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatal(err)
	}
	find := func(name string) protoreflect.MessageDescriptor {
		d, err := files.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			t.Fatal(err)
		}
		return d.(protoreflect.MessageDescriptor)
	}
	reqD, respD := find("inference.ModelInferRequest"), find("inference.ModelInferResponse")
	inD := find("inference.ModelInferRequest.InferInputTensor")

	x := randImages(1, 16, 30)
	req := dynamicpb.NewMessage(reqD)
	req.Set(reqD.Fields().ByName("model_name"), protoreflect.ValueOfString("tiny"))
	in := dynamicpb.NewMessage(inD)
	in.Set(inD.Fields().ByName("name"), protoreflect.ValueOfString("input"))
	in.Set(inD.Fields().ByName("datatype"), protoreflect.ValueOfString("FP32"))
	shape := in.Mutable(inD.Fields().ByName("shape")).List()
	for _, d := range []int64{1, 3, 16, 16} {
		shape.Append(protoreflect.ValueOfInt64(d))
	}
	req.Mutable(reqD.Fields().ByName("inputs")).List().Append(protoreflect.ValueOfMessage(in))
	req.Mutable(reqD.Fields().ByName("raw_input_contents")).List().Append(protoreflect.ValueOfBytes(tensor.F32Bytes(x)))

	resp := dynamicpb.NewMessage(respD)
	if err := conn.Invoke(ctx, "/inference.GRPCInferenceService/ModelInfer", req, resp); err != nil {
		t.Fatal(err)
	}
	raw := resp.Get(respD.Fields().ByName("raw_output_contents")).List().Get(0).Bytes()
	checkLogits(t, tensor.BytesF32(append([]byte(nil), raw...)), s.Expected(t, x, 1))
}

// TestGrpcurl runs the grpcurl commands the README shows.
func TestGrpcurl(t *testing.T) {
	if _, err := exec.LookPath("grpcurl"); err != nil {
		t.Skip("grpcurl is not on PATH (go install github.com/fullstorydev/grpcurl/cmd/grpcurl@latest)")
	}
	s := servertest.Start(t, servertest.Options{})
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("grpcurl", append([]string{"-plaintext"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run(s.GRPCAddr, "list"); !strings.Contains(out, "inference.GRPCInferenceService") {
		t.Errorf("list: %s", out)
	}
	if out := run(s.GRPCAddr, "inference.GRPCInferenceService/ServerReady"); !strings.Contains(out, `"ready": true`) {
		t.Errorf("ServerReady: %s", out)
	}
	if out := run("-d", `{"name":"tiny"}`, s.GRPCAddr, "inference.GRPCInferenceService/ModelMetadata"); !strings.Contains(out, `"platform": "goinfer_cpu"`) {
		t.Errorf("ModelMetadata: %s", out)
	}
	x := randImages(1, 16, 31)
	body := fmt.Sprintf(`{"model_name":"tiny","inputs":[{"name":"input","datatype":"FP32","shape":[1,3,16,16]}],`+
		`"outputs":[{"name":"logits","parameters":{"classification":{"int64_param":3}}}],"raw_input_contents":[%q]}`,
		base64.StdEncoding.EncodeToString(tensor.F32Bytes(x)))
	out := run("-d", body, s.GRPCAddr, "inference.GRPCInferenceService/ModelInfer")
	var resp struct {
		Outputs []struct {
			Datatype string
			Shape    []string
		}
		RawOutputContents []string
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("ModelInfer output: %v\n%s", err, out)
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Datatype != "BYTES" || len(resp.RawOutputContents) != 1 {
		t.Fatalf("ModelInfer: %s", out)
	}
}
