using { EventQueuesService as ops } from './event-queues';

// Fiori elements list reports and object pages over the operator service work without further annotations in the
// app: a Fiori app (or CAP's Fiori preview) over DeadOutboxMessages lists the newest failures first, filters by
// queue, service and event, and revives or deletes the selected dead letter from the list or its object page.

annotate ops.DeadOutboxMessages with {
  ID                   @title: 'Message ID';
  timestamp            @title: 'Enqueued';
  target               @title: 'Queue';
  service              @title: 'Service';
  event                @title: 'Event';
  task                 @title: 'Task';
  attempts             @title: 'Attempts';
  lastError            @title: 'Last Error'    @UI.MultiLineText;
  lastAttemptTimestamp @title: 'Last Attempt';
  msg                  @title: 'Message (JSON)' @UI.MultiLineText;
  appid                @title: 'Application'   @UI.Hidden;
};

annotate ops.DeadOutboxMessages with @(
  UI.HeaderInfo          : {
    TypeName       : 'Dead Letter',
    TypeNamePlural : 'Dead Letters',
    Title          : { Value: event },
    Description    : { Value: target }
  },
  UI.SelectionFields     : [target, service, event, task, lastAttemptTimestamp],
  // Newest failures first: after an incident, what just broke is on top.
  UI.PresentationVariant : {
    SortOrder      : [{ Property: lastAttemptTimestamp, Descending: true }],
    Visualizations : ['@UI.LineItem']
  },
  UI.LineItem            : [
    { Value: target, ![@UI.Importance]: #High },
    { Value: service, ![@UI.Importance]: #High },
    { Value: event, ![@UI.Importance]: #High },
    { Value: task },
    { Value: timestamp },
    { Value: attempts },
    { Value: lastAttemptTimestamp, ![@UI.Importance]: #High },
    { Value: lastError, ![@UI.Importance]: #High },
    { $Type: 'UI.DataFieldForAction', Action: 'EventQueuesService.revive', Label: 'Revive' },
    { $Type: 'UI.DataFieldForAction', Action: 'EventQueuesService.delete', Label: 'Delete' }
  ],
  UI.Identification      : [
    { $Type: 'UI.DataFieldForAction', Action: 'EventQueuesService.revive', Label: 'Revive' },
    { $Type: 'UI.DataFieldForAction', Action: 'EventQueuesService.delete', Label: 'Delete' }
  ],
  UI.FieldGroup #Message : { Data: [
    { Value: ID },
    { Value: target },
    { Value: service },
    { Value: event },
    { Value: task },
    { Value: timestamp },
    { Value: attempts },
    { Value: lastAttemptTimestamp }
  ]},
  UI.FieldGroup #Error   : { Data: [{ Value: lastError }] },
  UI.FieldGroup #Payload : { Data: [{ Value: msg }] },
  UI.Facets              : [
    { $Type: 'UI.ReferenceFacet', ID: 'Message', Label: 'Message', Target: '@UI.FieldGroup#Message' },
    { $Type: 'UI.ReferenceFacet', ID: 'Error', Label: 'Last Error', Target: '@UI.FieldGroup#Error' },
    { $Type: 'UI.ReferenceFacet', ID: 'Payload', Label: 'Payload', Target: '@UI.FieldGroup#Payload' }
  ]
);

annotate ops.PendingOutboxMessages with {
  ID                   @title: 'Message ID';
  waitingSince         @title: 'Waiting Since';
  target               @title: 'Queue';
  service              @title: 'Service';
  event                @title: 'Event';
  task                 @title: 'Task';
  attempts             @title: 'Attempts';
  dueAt                @title: 'Due';
  status               @title: 'Status';
  claimedBy            @title: 'Processed By';
  lastError            @title: 'Last Error'    @UI.MultiLineText;
  lastAttemptTimestamp @title: 'Last Attempt';
  msg                  @title: 'Message (JSON)' @UI.MultiLineText;
  appid                @title: 'Application'   @UI.Hidden;
};

annotate ops.PendingOutboxMessages with @(
  UI.HeaderInfo          : {
    TypeName       : 'Pending Message',
    TypeNamePlural : 'Pending Messages',
    Title          : { Value: event },
    Description    : { Value: target }
  },
  UI.SelectionFields     : [target, service, event, status, task],
  // Longest waiting first: that is the relay lag.
  UI.PresentationVariant : {
    SortOrder      : [{ Property: waitingSince, Descending: false }],
    Visualizations : ['@UI.LineItem']
  },
  UI.LineItem            : [
    { Value: target, ![@UI.Importance]: #High },
    { Value: service, ![@UI.Importance]: #High },
    { Value: event, ![@UI.Importance]: #High },
    { Value: task },
    { Value: waitingSince, ![@UI.Importance]: #High },
    { Value: dueAt },
    { Value: attempts },
    { Value: status },
    { Value: claimedBy },
    { Value: lastError }
  ],
  UI.FieldGroup #Message : { Data: [
    { Value: ID },
    { Value: target },
    { Value: service },
    { Value: event },
    { Value: task },
    { Value: waitingSince },
    { Value: dueAt },
    { Value: attempts },
    { Value: status },
    { Value: claimedBy },
    { Value: lastAttemptTimestamp },
    { Value: lastError }
  ]},
  UI.FieldGroup #Payload : { Data: [{ Value: msg }] },
  UI.Facets              : [
    { $Type: 'UI.ReferenceFacet', ID: 'Message', Label: 'Message', Target: '@UI.FieldGroup#Message' },
    { $Type: 'UI.ReferenceFacet', ID: 'Payload', Label: 'Payload', Target: '@UI.FieldGroup#Payload' }
  ]
);
