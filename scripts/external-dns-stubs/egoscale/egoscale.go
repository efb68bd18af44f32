// Package v3 has the names external-dns's Exoscale provider uses; every call fails.
package v3

import (
	"context"
	"errors"

	"github.com/exoscale/egoscale/v3/credentials"
)

var errLeftOut = errors.New("the Exoscale SDK is not part of this external-dns build")

type UUID string

type Endpoint string

type OperationState string

const OperationStateSuccess OperationState = "success"

type Operation struct{}

type DNSDomain struct {
	ID          UUID
	UnicodeName string
}

type DNSDomainRecordType string

type DNSDomainRecord struct {
	ID      UUID
	Name    string
	Type    DNSDomainRecordType
	Content string
	Ttl     int64
}

type CreateDNSDomainRecordRequestType string

type CreateDNSDomainRecordRequest struct {
	Name    string
	Type    CreateDNSDomainRecordRequestType
	Content string
	Ttl     int64
}

type UpdateDNSDomainRecordRequest struct {
	Content string
	Ttl     int64
}

type ListDNSDomainsResponse struct {
	DNSDomains []DNSDomain
}

type ListDNSDomainRecordsResponse struct {
	DNSDomainRecords []DNSDomainRecord
}

type ClientOpt func(*Client) error

func ClientOptWithEndpoint(Endpoint) ClientOpt { return func(*Client) error { return nil } }

type Client struct{}

func NewClient(*credentials.Credentials, ...ClientOpt) (*Client, error) { return nil, errLeftOut }

func (*Client) ListDNSDomains(context.Context) (*ListDNSDomainsResponse, error) {
	return nil, errLeftOut
}

func (*Client) ListDNSDomainRecords(context.Context, UUID) (*ListDNSDomainRecordsResponse, error) {
	return nil, errLeftOut
}

func (*Client) CreateDNSDomainRecord(context.Context, UUID, CreateDNSDomainRecordRequest) (*Operation, error) {
	return nil, errLeftOut
}

func (*Client) UpdateDNSDomainRecord(context.Context, UUID, UUID, UpdateDNSDomainRecordRequest) (*Operation, error) {
	return nil, errLeftOut
}

func (*Client) DeleteDNSDomainRecord(context.Context, UUID, UUID) (*Operation, error) {
	return nil, errLeftOut
}

func (*Client) Wait(context.Context, *Operation, ...OperationState) (*Operation, error) {
	return nil, errLeftOut
}
