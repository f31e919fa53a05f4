// Package demand is the signal of the connected clients: which locality
// classes have clients, and the demand each Balanced upstream's split is
// divided by (the clients' demand weights, or the zones' shares of the
// requests their load reports show), followed with hysteresis so client
// churn does not push to every client. It hands both to the Directory as
// batches, like any other signal, so what a client is sent, explain and
// status all read one snapshot.
package demand
